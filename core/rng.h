#pragma once
// The one random number generator behind init, dropout, data order and
// sampling.  It is counter based: draw number i of a generator seeded with s
// is a pure function of (s, i), so any kernel (CPU thread or CUDA block) can
// produce its slice of a stream without sequential state, and a generator's
// whole state is two integers that checkpoints store.
//
//   bits(s, i)    = splitmix64(s * 0x9E3779B97F4A7C15 + i)        (64 bits)
//   uniform(s, i) = (bits(s, i) >> 40) * 2^-24                     in [0, 1)
//   normal        = Box-Muller on two consecutive uniforms
//   integer       = low + bits(s, i) mod (high - low)              in [low, high)
//                   (Tensor::randint; the modulo bias is below (high - low) / 2^64)
//
// splitmix64 is Steele, Lea and Flood's finaliser (the seeding generator of
// xoshiro); it passes BigCrush as a counter-based generator.
#include <cstdint>

// Lets CUDA kernels draw from the same streams as the CPU (dropout matches
// bitwise across devices): the pure draw functions compile for both.
#if defined(__CUDACC__)
#define HEADROOM_HOST_DEVICE __host__ __device__
#else
#define HEADROOM_HOST_DEVICE
#endif

namespace headroom {

HEADROOM_HOST_DEVICE inline uint64_t splitmix64(uint64_t x) {
  x += 0x9E3779B97F4A7C15ULL;
  x = (x ^ (x >> 30)) * 0xBF58476D1CE4E5B9ULL;
  x = (x ^ (x >> 27)) * 0x94D049BB133111EBULL;
  return x ^ (x >> 31);
}

class Generator {
 public:
  HEADROOM_HOST_DEVICE explicit Generator(uint64_t seed = 0) : seed_(seed) {}

  uint64_t seed() const { return seed_; }
  uint64_t offset() const { return offset_; }
  void set_state(uint64_t seed, uint64_t offset) { seed_ = seed, offset_ = offset; }

  // Reserves n draws and returns the index of the first; callers then use
  // bits_at / uniform_at for their range (possibly in parallel).
  uint64_t reserve(uint64_t n);

  // Data-parallel training (docs/distributed.md): while a share is set, this
  // process computes rows [begin, begin + count) of a batch of `total` rows,
  // and every reserve(n) stands for the whole batch's draws.  n must be
  // count · per (per draws for each row, rows first, as for every batched
  // op's draws); reserve returns the index of row `begin`'s first draw and
  // advances past all `total` rows, so the ranks' draws together are the
  // draws one process makes for the whole batch.
  void share_rows(uint64_t begin, uint64_t count, uint64_t total);
  void clear_row_share() { share_count_ = 0; }
  HEADROOM_HOST_DEVICE uint64_t bits_at(uint64_t i) const { return splitmix64(seed_ * 0x9E3779B97F4A7C15ULL + i); }
  HEADROOM_HOST_DEVICE float uniform_at(uint64_t i) const { return static_cast<float>(bits_at(i) >> 40) * 0x1.0p-24f; }
  HEADROOM_HOST_DEVICE double uniform64_at(uint64_t i) const {
    return static_cast<double>(bits_at(i) >> 11) * 0x1.0p-53;
  }

  // Sequential convenience draws.
  uint64_t next_bits() { return bits_at(reserve(1)); }
  double next_uniform() { return uniform64_at(reserve(1)); }
  int64_t next_int(int64_t n) { return static_cast<int64_t>(next_bits() % static_cast<uint64_t>(n)); }
  double next_normal();

 private:
  uint64_t seed_;
  uint64_t offset_ = 0;
  uint64_t share_begin_ = 0, share_count_ = 0, share_total_ = 0;  // share_count_ 0: no share
};

// The process-wide generator used when an op is not given one.
Generator& default_generator();
void manual_seed(uint64_t seed);

}  // namespace headroom
