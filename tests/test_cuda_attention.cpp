// CUDA attention kernels against the CPU ones through the public ops, forward
// and backward: dense and routed, causal (with offsets that hide every key
// from some rows), key padding (a fully padded sequence), shared K/V
// (h_kv = 1), dropout, sequence lengths that are not multiples of the tiles,
// head dimensions on and off the 32-column steps, K and V read in place (a KV
// cache's prefix), f32 and f64.  Skipped (and
// passing) without a device.
#include "cuda_helpers.h"
#include "headroom/ops/attention.h"

using namespace headroom;
using headroom::testing::check_parity;
using headroom::testing::compare;

namespace {

using AttentionFn = std::function<Tensor(const std::vector<Tensor>&)>;

Tensor random(const Shape& shape, uint64_t seed, DType dtype = DType::f32) {
  Generator gen(seed);
  return Tensor::randn(shape, gen, dtype);
}

// b8 [B, S] with 1 where padded[b] lists s.
Tensor padding_mask(int64_t batch, int64_t keys, const std::vector<std::vector<int64_t>>& padded) {
  std::vector<uint8_t> mask(batch * keys, 0);
  for (int64_t b = 0; b < batch; ++b)
    for (int64_t s : padded[b]) mask[b * keys + s] = 1;
  return Tensor::from_vector(mask, {batch, keys});
}

// `opts` with in[3] as the key padding mask when given, and dropout drawn
// from a generator seeded afresh on every call (the CPU and CUDA runs draw
// the same mask).
AttentionOptions with_inputs(AttentionOptions opts, const std::vector<Tensor>& in, Generator& gen) {
  if (in.size() > 3) opts.key_padding_mask = in[3];
  opts.generator = &gen;
  return opts;
}

// attention(q, k, v) of in[0..2] (+ mask in[3]).
AttentionFn dense(const AttentionOptions& opts) {
  return [opts](const std::vector<Tensor>& in) {
    Generator gen(77);
    return attention(in[0], in[1], in[2], with_inputs(opts, in, gen));
  };
}

// routed_attention(q_rows, k, v, plan) of in[0..2] (+ mask in[3]).
AttentionFn routed(const RoutePlan& plan, int64_t seq_len, const AttentionOptions& opts) {
  return [plan, seq_len, opts](const std::vector<Tensor>& in) {
    Generator gen(77);
    return routed_attention(in[0], in[1], in[2], plan, seq_len, with_inputs(opts, in, gen));
  };
}

// q [B, h, T, d], k, v [B, h_kv, S, d] of `dtype`, seeded from `seed`.
std::vector<Tensor> qkv(int64_t B, int64_t h, int64_t h_kv, int64_t T, int64_t S, int64_t d, uint64_t seed,
                        DType dtype = DType::f32) {
  return {random({B, h, T, d}, seed, dtype), random({B, h_kv, S, d}, seed + 1, dtype),
          random({B, h_kv, S, d}, seed + 2, dtype)};
}

// A plan over B*T tokens with `per_token` distinct heads each out of `heads`;
// head `heads - 1` is left empty when `leave_last_empty`.
RoutePlan random_plan(int64_t tokens, int64_t per_token, int64_t heads, bool leave_last_empty, uint64_t seed) {
  const int64_t usable = leave_last_empty ? heads - 1 : heads;
  Generator pick(seed);
  std::vector<int32_t> choices;
  for (int64_t n = 0; n < tokens; ++n) {
    const int64_t first = pick.next_int(usable);
    for (int64_t j = 0; j < per_token; ++j) choices.push_back(int32_t((first + j) % usable));
  }
  return route(Tensor::from_vector(choices, {tokens, per_token}), heads);
}

AttentionOptions causal_with_dropout(double dropout) {
  AttentionOptions o;
  o.causal = true;
  o.dropout = dropout;
  return o;
}

constexpr double kAtol32 = 1e-4, kRtol32 = 1e-4;

}  // namespace

TEST_CASE("cuda attention: dense forward and backward match the CPU over T, S, d_h, causal offsets and h_kv") {
  struct Case {
    int64_t B, h, h_kv, T, S, d;
    bool causal;
    int64_t offset;
  };
  const std::vector<Case> cases = {
      {1, 1, 1, 1, 1, 16, false, 0},     // one query, one key
      {2, 3, 3, 7, 7, 32, true, 0},      // shorter than a tile
      {2, 2, 2, 65, 65, 64, true, 0},    // one past a multiple of 32
      {1, 2, 2, 130, 130, 13, true, 0},  // odd d_h, several key blocks
      {2, 2, 1, 33, 70, 128, false, 0},  // shared K/V, S != T
      {1, 2, 2, 40, 50, 200, true, 10},  // d_h > 128, KV-cache offset S - T
      {1, 1, 1, 5, 9, 1, true, -2},      // d_h = 1; rows 0, 1 see no key
      {1, 2, 2, 3, 0, 8, false, 0},      // no keys at all
  };
  for (const Case& c : cases) {
    CAPTURE(c.T);
    CAPTURE(c.S);
    CAPTURE(c.d);
    CAPTURE(c.h_kv);
    CAPTURE(c.offset);
    AttentionOptions o;
    o.causal = c.causal;
    o.causal_offset = c.offset;
    check_parity(dense(o), qkv(c.B, c.h, c.h_kv, c.T, c.S, c.d, 10 + uint64_t(c.T)), kAtol32, kRtol32);
  }
}

TEST_CASE("cuda attention: non-contiguous q, k, v and an explicit scale") {
  AttentionOptions o;
  o.scale = 0.3;
  o.causal = true;
  // Inputs stored [B, T, h, d] and viewed [B, h, T, d]; v a slice of a wider tensor.
  AttentionFn permuted = [o](const std::vector<Tensor>& in) {
    return attention(in[0].permute({0, 2, 1, 3}), in[1].permute({0, 2, 1, 3}), in[2].narrow(3, 1, 24), o);
  };
  check_parity(permuted, {random({2, 37, 3, 24}, 1), random({2, 37, 3, 24}, 2), random({2, 3, 37, 26}, 3)}, kAtol32,
               kRtol32);
}

TEST_CASE("cuda attention reads K and V in place: a KV cache's valid prefix, and rows h·d_h apart") {
  // The cache: k, v [B, h, S, d] the first S of 2S rows of their storage, one query at offset S - 1.
  AttentionOptions o;
  o.causal = true, o.causal_offset = 40 - 1;
  AttentionFn prefix = [o](const std::vector<Tensor>& in) {
    return attention(in[0], in[1].narrow(2, 0, 40), in[2].narrow(2, 0, 40), o);
  };
  check_parity(prefix, {random({2, 3, 1, 64}, 4), random({2, 3, 80, 64}, 5), random({2, 3, 80, 64}, 6)}, kAtol32,
               kRtol32);
  // K and V stored [B, S, h, d] and viewed [B, h, S, d]: the same strides, rows h·d apart.
  AttentionFn permuted = [](const std::vector<Tensor>& in) {
    return attention(in[0], in[1].permute({0, 2, 1, 3}), in[2].permute({0, 2, 1, 3}), AttentionOptions());
  };
  check_parity(permuted, {random({2, 3, 70, 32}, 7), random({2, 70, 3, 32}, 8), random({2, 70, 3, 32}, 9)}, kAtol32,
               kRtol32);
}

TEST_CASE("cuda attention: key padding with a fully padded sequence, causal or not, h_kv = h or 1") {
  const int64_t B = 3, h = 2, T = 37, d = 24;
  std::vector<int64_t> every_key(T);
  for (int64_t s = 0; s < T; ++s) every_key[s] = s;
  Tensor mask = padding_mask(B, T, {{}, {0, 5, 36}, every_key});  // batch 2 sees nothing
  for (int64_t h_kv : {h, int64_t(1)})
    for (bool causal : {false, true}) {
      CAPTURE(h_kv);
      CAPTURE(causal);
      AttentionOptions o;
      o.causal = causal;
      std::vector<Tensor> inputs = qkv(B, h, h_kv, T, T, d, 20);
      inputs.push_back(mask);
      check_parity(dense(o), inputs, kAtol32, kRtol32);
    }
}

TEST_CASE("cuda attention: dropout reproduces the CPU mask, dense and routed, h_kv = h or 1") {
  const int64_t B = 2, h = 3, T = 45, d = 32;
  const AttentionOptions o = causal_with_dropout(0.2);
  Tensor mask = padding_mask(B, T, {{4}, {0, 1, 44}});
  RoutePlan plan = random_plan(B * T, 2, h, false, 5);
  for (int64_t h_kv : {h, int64_t(1)}) {
    CAPTURE(h_kv);
    std::vector<Tensor> inputs = qkv(B, h, h_kv, T, T, d, 30);
    inputs.push_back(mask);
    check_parity(dense(o), inputs, kAtol32, kRtol32);
    inputs[0] = random({plan.rows(), d}, 33);
    check_parity(routed(plan, T, o), inputs, kAtol32, kRtol32);
  }
}

TEST_CASE("cuda routed_attention: an empty head, T = 1, causal with padding, h_kv = h or 1") {
  const int64_t B = 2, h = 4, T = 70, d = 32;
  RoutePlan plan = random_plan(B * T, 2, h, true, 6);  // head 3 gets no rows
  REQUIRE(plan.counts.to_vector<int32_t>()[3] == 0);
  AttentionOptions causal;
  causal.causal = true;
  for (int64_t h_kv : {h, int64_t(1)}) {
    CAPTURE(h_kv);
    std::vector<Tensor> inputs = qkv(B, h, h_kv, T, T, d, 40);
    inputs[0] = random({plan.rows(), d}, 43);
    check_parity(routed(plan, T, {}), inputs, kAtol32, kRtol32);
    inputs.push_back(padding_mask(B, T, {{2, 69}, {0}}));  // token (b 1, t 0) sees nothing
    check_parity(routed(plan, T, causal), inputs, kAtol32, kRtol32);
  }
  // T = 1: every token its own sequence; d_h = 16; one head per token.
  RoutePlan single = random_plan(3, 1, 2, false, 7);
  std::vector<Tensor> inputs = qkv(3, 2, 2, 1, 1, 16, 50);
  inputs[0] = random({single.rows(), 16}, 53);
  check_parity(routed(single, 1, causal), inputs, kAtol32, kRtol32);
}

TEST_CASE("cuda attention f64: dense and routed with every option on") {
  const int64_t B = 2, h = 2, T = 65, d = 40;
  const AttentionOptions o = causal_with_dropout(0.1);
  Tensor mask = padding_mask(B, T, {{7, 64}, {1}});
  RoutePlan plan = random_plan(B * T, 1, h, false, 8);
  for (int64_t h_kv : {h, int64_t(1)}) {
    CAPTURE(h_kv);
    std::vector<Tensor> inputs = qkv(B, h, h_kv, T, T, d, 60, DType::f64);
    inputs.push_back(mask);
    check_parity(dense(o), inputs, 1e-10, 1e-10);
    inputs[0] = random({plan.rows(), d}, 63, DType::f64);
    check_parity(routed(plan, T, o), inputs, 1e-10, 1e-10);
  }
}

TEST_CASE("cuda attention: routed over every (token, head) pair equals dense, and reruns are bitwise equal") {
  const int64_t B = 2, h = 3, T = 50, d = 32;
  const AttentionOptions o = causal_with_dropout(0.1);
  std::vector<Tensor> in = qkv(B, h, 1, T, T, d, 70);
  for (Tensor& t : in) t = t.to(Device::cuda()).set_requires_grad();
  Tensor mask = padding_mask(B, T, {{3}, {}}).to(Device::cuda());
  in.push_back(mask);
  // Token n chooses heads 0..h-1 in order: segment e holds every token, so
  // q_rows = q as [h, B*T, d].
  std::vector<int32_t> all_heads;
  for (int64_t n = 0; n < B * T; ++n)
    for (int32_t e = 0; e < h; ++e) all_heads.push_back(e);
  RoutePlan plan = route(Tensor::from_vector(all_heads, {B * T, h}), h);
  Tensor out = dense(o)(in);
  Tensor routed_out = routed(plan, T, o)({in[0].permute({1, 0, 2, 3}).reshape({h * B * T, d}), in[1], in[2], mask});
  CHECK(compare(routed_out.view({h, B, T, d}).permute({1, 0, 2, 3}).to(Device::cpu()), out.to(Device::cpu()), 1e-6) ==
        "");

  // Backward twice (shared K/V: dK, dV summed over heads): identical bits.
  Tensor seed = random(out.shape(), 71).to(Device::cuda());
  auto gradients = [&]() {
    for (int i = 0; i < 3; ++i) in[i].zero_grad();
    dense(o)(in).backward(seed);
    return std::vector<Tensor>{in[0].grad().to(Device::cpu()), in[1].grad().to(Device::cpu()),
                               in[2].grad().to(Device::cpu())};
  };
  std::vector<Tensor> first = gradients(), second = gradients();
  for (int i = 0; i < 3; ++i) CHECK(compare(second[i], first[i], 0) == "");
}

TEST_CASE("cuda attention errors: d_h above the kernels' limit, mask on another device") {
  std::vector<Tensor> big = qkv(1, 1, 1, 2, 2, 257, 80);
  CHECK_THROWS_HEADROOM(attention(big[0].to(Device::cuda()), big[1].to(Device::cuda()), big[2].to(Device::cuda())),
                        "[attention] CUDA kernels take a head dimension d_h <= 256, got 257");
  std::vector<Tensor> in = qkv(1, 1, 1, 2, 2, 8, 81);
  AttentionOptions o;
  o.key_padding_mask = padding_mask(1, 2, {{}});  // on the CPU
  CHECK_THROWS_HEADROOM(attention(in[0].to(Device::cuda()), in[1].to(Device::cuda()), in[2].to(Device::cuda()), o),
                        "[attention] inputs on different devices");
}
