// Attention: the fused kernel against the reference kernel (forward and backward), gradchecks
// through every mask and option, routed == dense on the selected pairs,
// thread-count determinism, frozen PyTorch fixtures, and errors.
#include <cmath>
#include <limits>

#include "fixture_reader.h"
#include "headroom/ops/attention.h"
#include "headroom/ops/cpu/attention.h"
#include "helpers.h"
#include "headroom/ops/cpu/vector_math.h"
#include "headroom/ops/reference/kernels.h"

using namespace headroom;

namespace {

Tensor random(const Shape& shape, uint64_t seed, DType dtype = DType::f64) {
  Generator gen(seed);
  return Tensor::randn(shape, gen, dtype);
}
Tensor param(const Shape& shape, uint64_t seed) { return random(shape, seed).set_requires_grad(); }

// b8 [B, S] with 1 where padded[b] lists s.
Tensor padding_mask(int64_t batch, int64_t keys, const std::vector<std::vector<int64_t>>& padded) {
  std::vector<uint8_t> mask(batch * keys, 0);
  for (int64_t b = 0; b < batch; ++b)
    for (int64_t s : padded[b]) mask[b * keys + s] = 1;
  return Tensor::from_vector(mask, {batch, keys});
}

// The dense problem of q [B, h, T, d], k, v [B, h_kv, S, d] (contiguous), as
// ops/attention.cpp builds it; `first` is the draw the dropout mask starts at.
kernels::AttentionProblem dense_problem(const Tensor& q, const Tensor& k, const AttentionOptions& o,
                                        const std::vector<uint8_t>& pad, uint64_t seed = 0, uint64_t first = 0) {
  kernels::AttentionProblem p;
  p.batch = q.size(0), p.heads = q.size(1), p.seq_len = q.size(2), p.d_h = q.size(3);
  p.kv_heads = k.size(1), p.num_keys = k.size(2);
  p.scale = o.scale != 0 ? o.scale : 1 / std::sqrt(double(p.d_h));
  p.causal = o.causal, p.causal_offset = o.causal_offset;
  p.kv_strides[0] = p.kv_heads * p.num_keys * p.d_h, p.kv_strides[1] = p.num_keys * p.d_h, p.kv_strides[2] = p.d_h;
  p.key_padding = pad.empty() ? nullptr : pad.data();
  p.dropout = o.dropout, p.dropout_seed = seed, p.dropout_first = first;
  for (int64_t b = 0; b < p.batch; ++b)
    for (int64_t head = 0; head < p.heads; ++head) {
      const int64_t row = (b * p.heads + head) * p.seq_len;
      p.groups.push_back({row, row + p.seq_len, b, head});
      for (int64_t t = 0; t < p.seq_len; ++t) p.positions.push_back(int32_t(t));
    }
  return p;
}

// The reference: reference::attention_forward (ops/reference/kernels.h, one
// materialised row of scores at a time) in double.
Tensor naive_attention(const Tensor& q, const Tensor& k, const Tensor& v, const AttentionOptions& o, uint64_t seed = 0,
                       uint64_t first = 0) {
  std::vector<uint8_t> pad =
      o.key_padding_mask.defined() ? o.key_padding_mask.to_vector<uint8_t>() : std::vector<uint8_t>();
  Tensor q64 = q.to(DType::f64).contiguous(), k64 = k.to(DType::f64).contiguous(), v64 = v.to(DType::f64).contiguous();
  Tensor out = Tensor::empty(q.shape(), DType::f64), lse = Tensor::empty({q.numel() / q.size(3)}, DType::f64);
  reference::attention_forward<double>(dense_problem(q, k, o, pad, seed, first), q64.data<double>(), k64.data<double>(),
                                       v64.data<double>(), out.data<double>(), lse.data<double>());
  return out;
}

void check_gradcheck(const autograd::GradcheckFn& fn, const std::vector<Tensor>& inputs) {
  auto result = gradcheck(fn, inputs);
  CHECK_MESSAGE(result.ok, result.message);
}

// Dense attention of the three inputs with fixed options, for gradcheck.
autograd::GradcheckFn dense_fn(const AttentionOptions& opts) {
  return [opts](const std::vector<Tensor>& in) { return attention(in[0], in[1], in[2], opts); };
}

// A plan routing token n to `choices[n]` (k heads each) over `heads` heads.
RoutePlan plan_of(const std::vector<int32_t>& choices, int64_t k, int64_t heads) {
  return route(Tensor::from_vector(choices, {int64_t(choices.size()) / k, k}), heads);
}

// Rows of dense [B, h, T, d] in plan order → [R, d] (no grad).
Tensor gather_pairs(const Tensor& dense, const RoutePlan& plan) {
  const int64_t h = dense.size(1), T = dense.size(2), d = dense.size(3);
  std::vector<double> src = dense.to_vector<double>(), rows;
  for (int64_t r = 0; r < plan.rows(); ++r) {
    int64_t n = plan.token_of_row(r), b = n / T, t = n % T, head = plan.segment_of_row(r);
    rows.insert(rows.end(), src.begin() + ((b * h + head) * T + t) * d, src.begin() + ((b * h + head) * T + t + 1) * d);
  }
  return Tensor::from_vector(rows, {plan.rows(), d}).to(dense.dtype());
}

// The reverse: [R, d] rows into a zero [B, h, T, d].
Tensor scatter_pairs(const Tensor& rows, const RoutePlan& plan, const Shape& dense_shape) {
  const int64_t h = dense_shape[1], T = dense_shape[2], d = dense_shape[3];
  std::vector<double> src = rows.to_vector<double>(), dense(shape_numel(dense_shape), 0.0);
  for (int64_t r = 0; r < plan.rows(); ++r) {
    int64_t n = plan.token_of_row(r), b = n / T, t = n % T, head = plan.segment_of_row(r);
    std::copy(src.begin() + r * d, src.begin() + (r + 1) * d, dense.begin() + ((b * h + head) * T + t) * d);
  }
  return Tensor::from_vector(dense, dense_shape).to(rows.dtype());
}

}  // namespace

TEST_CASE("exp_inplace: the polynomial exp is accurate to ~1e-7, 0 below -87.3 and NaN for NaN") {
  std::vector<float> x;
  for (double v = -87.0; v <= 88.0; v += 0.0137) x.push_back(float(v));
  std::vector<float> y = x;
  cpu::exp_inplace(y.data(), int64_t(y.size()));
  double worst = 0;
  for (size_t i = 0; i < x.size(); ++i) worst = std::max(worst, std::abs(y[i] / std::exp(double(x[i])) - 1));
  CHECK(worst < 2.5e-7);
  std::vector<float> low = {-87.5f, -1000.0f, -std::numeric_limits<float>::infinity(), 0.0f};
  cpu::exp_inplace(low.data(), 4);
  CHECK(low == std::vector<float>{0, 0, 0, 1});
  std::vector<float> nan = {1.0f, std::numeric_limits<float>::quiet_NaN(), 2.0f};  // UBSan checks the int conversion
  cpu::exp_inplace(nan.data(), 3);
  CHECK(std::isnan(nan[1]));
  CHECK(nan[2] == doctest::Approx(std::exp(2.0)).epsilon(1e-6));
}

TEST_CASE("attention f32 forward equals the materialised loop over multi-tile shapes and every mask") {
  // T = 150 > kQueryTile and S up to 300 > kKeyBlock: several tiles and key blocks per group.
  const int64_t B = 2, h = 3, d = 16;
  struct Case {
    const char* name;
    int64_t T, S, h_kv;
    bool causal;
    int64_t offset;
    bool padded;
  };
  for (const Case& c :
       {Case{"plain", 150, 150, 3, false, 0, false}, Case{"causal", 150, 150, 3, true, 0, false},
        Case{"causal + padding", 150, 150, 3, true, 0, true}, Case{"causal offset, T < S", 70, 300, 3, true, 230, true},
        Case{"negative offset hides early rows", 70, 150, 3, true, -20, false},
        Case{"h_kv = 1, non-causal S > T", 90, 200, 1, false, 0, true}}) {
    CAPTURE(c.name);
    Tensor q = random({B, h, c.T, d}, 1, DType::f32), k = random({B, c.h_kv, c.S, d}, 2, DType::f32);
    Tensor v = random({B, c.h_kv, c.S, d}, 3, DType::f32);
    AttentionOptions o;
    o.causal = c.causal;
    o.causal_offset = c.offset;
    if (c.padded) o.key_padding_mask = padding_mask(B, c.S, {{0, 5, 140}, {1, 2, 3, 64, 65, 129}});
    CHECK_CLOSE(attention(q, k, v, o), naive_attention(q, k, v, o).to(DType::f32), 2e-6, 1e-5);
  }
}

TEST_CASE("cpu::attention forward and backward equal the reference kernel: masks, dropout, h_kv = 1, row_of") {
  // Multi-tile: T = 70 > kQueryTile, S = 100 > kKeyBlock.  T <= kFewRows
  // (a decoding step: all keys at once) and T = 5 (blocked), with an offset
  // that hides rows and a batch whose keys are all padded (rows see no key).
  const int64_t B = 2, h = 2, S = 100, d = 8;
  struct Case {
    int64_t T, offset;
    bool batch_1_padded;
  };
  for (const Case& c :
       {Case{70, 20, false}, Case{1, S - 1, false}, Case{3, S - 3, true}, Case{4, -2, false}, Case{5, S - 5, true}})
    for (int64_t h_kv : {int64_t(2), int64_t(1)}) {
      const int64_t T = c.T;
      CAPTURE(T);
      CAPTURE(h_kv);
      Tensor q = random({B, h, T, d}, 60), k = random({B, h_kv, S, d}, 61), v = random({B, h_kv, S, d}, 62);
      Tensor dout = random({B, h, T, d}, 63);
      AttentionOptions o;
      o.causal = true, o.causal_offset = c.offset, o.dropout = 0.2;
      std::vector<uint8_t> pad(B * S, 0);
      pad[3] = pad[S + 50] = 1;
      if (c.batch_1_padded) std::fill(pad.begin() + S, pad.end(), uint8_t(1));
      kernels::AttentionProblem p = dense_problem(q, k, o, pad, 9, 4);
      std::vector<int32_t> row_of(B * h * T);  // the caller's rows in reverse
      for (size_t i = 0; i < row_of.size(); ++i) row_of[i] = int32_t(row_of.size() - 1 - i);
      p.row_of = row_of.data();
      std::vector<Tensor> fast, ref;
      for (bool use_ref : {false, true}) {
        std::vector<Tensor>& r = use_ref ? ref : fast;
        Tensor out = Tensor::empty(q.shape(), DType::f64), lse = Tensor::empty({B * h * T}, DType::f64);
        Tensor dq = Tensor::empty(q.shape(), DType::f64), dk = Tensor::empty(k.shape(), DType::f64),
               dv = Tensor::empty(k.shape(), DType::f64);
        auto fwd = use_ref ? reference::attention_forward<double> : cpu::attention_forward<double>;
        auto bwd = use_ref ? reference::attention_backward<double> : cpu::attention_backward<double>;
        fwd(p, q.data<double>(), k.data<double>(), v.data<double>(), out.data<double>(), lse.data<double>());
        bwd(p, q.data<double>(), k.data<double>(), v.data<double>(), out.data<double>(), lse.data<double>(),
            dout.data<double>(), dq.data<double>(), dk.data<double>(), dv.data<double>());
        r = {out, lse, dq, dk, dv};
      }
      for (int i = 0; i < 5; ++i) CHECK_CLOSE(fast[i], ref[i], 1e-12, 1e-12);
    }
}

TEST_CASE("attention: explicit scale, dropout mask from the generator, and a fully masked row is 0") {
  Tensor q = random({2, 2, 80, 8}, 4, DType::f32), k = random({2, 2, 80, 8}, 5, DType::f32);
  Tensor v = random({2, 2, 80, 8}, 6, DType::f32);
  Generator gen(77);
  gen.reserve(5);
  AttentionOptions o;
  o.scale = 0.3;
  o.dropout = 0.25;
  o.generator = &gen;
  o.causal = true;
  o.key_padding_mask = padding_mask(2, 80, {{0, 1}, {}});  // batch 0: query 0 sees only padded key 0
  Tensor out = attention(q, k, v, o);
  CHECK(gen.offset() == 5 + 2 * 2 * 80 * 80);  // one draw reserved per (b, head, t, s)
  CHECK_CLOSE(out, naive_attention(q, k, v, o, 77, 5).to(DType::f32), 2e-6, 1e-5);
  for (int64_t head = 0; head < 2; ++head)
    CHECK(out.select(0, 0).select(0, head).select(0, 0).to_vector<float>() == std::vector<float>(8, 0.0f));
}

TEST_CASE("attention gradcheck: plain, non-contiguous inputs, and multi-tile causal") {
  check_gradcheck(dense_fn({}), {param({2, 2, 5, 3}, 1), param({2, 2, 7, 3}, 2), param({2, 2, 7, 3}, 3)});

  // q given as a permuted view [B, h, T, d] of [B, T, h, d].
  Tensor q_bthd = param({1, 4, 2, 3}, 4);
  auto permuted = [](const std::vector<Tensor>& in) {
    return attention(in[0].permute({0, 2, 1, 3}), in[1].transpose(1, 2), in[2], {});
  };
  check_gradcheck(permuted, {q_bthd, param({1, 5, 2, 3}, 5), param({1, 2, 5, 3}, 6)});

  // T = 70 > kQueryTile, S = 140 > kKeyBlock: backward across tiles and key blocks.
  AttentionOptions causal;
  causal.causal = true;
  causal.causal_offset = 70;
  check_gradcheck(dense_fn(causal), {param({1, 1, 70, 2}, 7), param({1, 1, 140, 2}, 8), param({1, 1, 140, 2}, 9)});
}

TEST_CASE("attention gradcheck: causal + key padding with a fully masked row, offset with T < S, h_kv = 1") {
  AttentionOptions masked;
  masked.causal = true;
  masked.key_padding_mask = padding_mask(2, 6, {{0, 4}, {1}});  // batch 0, query 0 sees nothing
  Tensor q = param({2, 2, 6, 3}, 10), k = param({2, 2, 6, 3}, 11), v = param({2, 2, 6, 3}, 12);
  check_gradcheck(dense_fn(masked), {q, k, v});
  Tensor g = Tensor::ones({2, 2, 6, 3}, DType::f64);
  q.zero_grad();
  attention(q, k, v, masked).backward(g);
  std::vector<double> dq = q.grad().to_vector<double>();
  for (int64_t c = 0; c < 3; ++c) CHECK(dq[c] == 0.0);  // (b 0, head 0, t 0) gets no gradient

  AttentionOptions offset;
  offset.causal = true;
  offset.causal_offset = 4;  // T = 3 queries are the last 3 of S = 7 keys
  check_gradcheck(dense_fn(offset), {param({2, 2, 3, 4}, 13), param({2, 2, 7, 4}, 14), param({2, 2, 7, 4}, 15)});

  AttentionOptions shared;
  shared.causal = true;
  shared.key_padding_mask = padding_mask(2, 5, {{2}, {}});
  check_gradcheck(dense_fn(shared), {param({2, 3, 5, 3}, 16), param({2, 1, 5, 3}, 17), param({2, 1, 5, 3}, 18)});
}

TEST_CASE("attention gradcheck with dropout: backward regenerates the forward's mask") {
  Generator gen(5);
  AttentionOptions o;
  o.dropout = 0.3;
  o.generator = &gen;
  o.causal = true;
  auto fn = [&](const std::vector<Tensor>& in) {
    gen.set_state(5, 0);  // the same mask on every evaluation
    return attention(in[0], in[1], in[2], o);
  };
  check_gradcheck(fn, {param({2, 2, 5, 3}, 19), param({2, 1, 5, 3}, 20), param({2, 1, 5, 3}, 21)});
}

TEST_CASE("routed_attention gradcheck: an empty head, all tokens on one head, causal and padded") {
  const int64_t B = 2, T = 4, d = 3;
  AttentionOptions o;
  o.causal = true;
  o.key_padding_mask = padding_mask(B, T, {{}, {0}});  // token (b 1, t 0) sees nothing
  // 8 tokens, 2 heads each over 4 heads; head 3 is never chosen.
  RoutePlan plan = plan_of({0, 1, 1, 2, 0, 2, 1, 0, 2, 1, 0, 1, 2, 0, 1, 2}, 2, 4);
  REQUIRE(plan.counts.to_vector<int32_t>()[3] == 0);
  auto fn = [&](const RoutePlan& p) {
    return [&p, o](const std::vector<Tensor>& in) { return routed_attention(in[0], in[1], in[2], p, T, o); };
  };
  check_gradcheck(fn(plan), {param({16, d}, 22), param({B, 4, T, d}, 23), param({B, 4, T, d}, 24)});
  check_gradcheck(fn(plan), {param({16, d}, 25), param({B, 1, T, d}, 26), param({B, 1, T, d}, 27)});

  RoutePlan one_head = plan_of(std::vector<int32_t>(B * T, 1), 1, 3);  // every token on head 1
  check_gradcheck(fn(one_head), {param({8, d}, 28), param({B, 3, T, d}, 29), param({B, 3, T, d}, 30)});
}

TEST_CASE("routed_attention equals dense attention on the selected pairs, outputs and gradients") {
  const int64_t B = 2, h = 4, T = 70, S = 90, d = 8;  // T > kQueryTile: a segment spans tiles
  std::vector<int32_t> choices;
  Generator pick(3);
  for (int64_t n = 0; n < B * T; ++n) {  // 2 distinct heads per token, head 3 rarely
    int32_t first = int32_t(pick.next_int(3)), second = int32_t((first + 1 + pick.next_int(2)) % 3);
    choices.push_back(first);
    choices.push_back(n % 17 == 0 ? 3 : second);
  }
  RoutePlan plan = plan_of(choices, 2, h);
  for (int64_t h_kv : {h, int64_t(1)}) {
    CAPTURE(h_kv);
    Generator gen(9);
    AttentionOptions o;
    o.causal = true;
    o.causal_offset = S - T;
    o.key_padding_mask = padding_mask(B, S, {{3, 50}, {0, 1, 2}});
    o.dropout = 0.1;
    o.generator = &gen;
    Tensor q = param({B, h, T, d}, 31), k = param({B, h_kv, S, d}, 32), v = param({B, h_kv, S, d}, 33);
    Tensor grad_rows = random({plan.rows(), d}, 34);
    Tensor dense = attention(q, k, v, o);
    dense.backward(scatter_pairs(grad_rows, plan, dense.shape()));
    Tensor dense_dk = k.grad(), dense_dv = v.grad();
    k.zero_grad(), v.zero_grad();

    gen.set_state(9, 0);
    Tensor q_rows = gather_pairs(q.detach(), plan).set_requires_grad();
    Tensor routed = routed_attention(q_rows, k, v, plan, T, o);
    routed.backward(grad_rows);
    CHECK_CLOSE(routed, gather_pairs(dense, plan), 1e-12);
    CHECK_CLOSE(q_rows.grad(), gather_pairs(q.grad(), plan), 1e-12);
    CHECK_CLOSE(k.grad(), dense_dk, 1e-12);
    CHECK_CLOSE(v.grad(), dense_dv, 1e-12);
  }
}

TEST_CASE("attention reads K and V in place from column slices of one projection") {
  const int64_t B = 2, T = 5, S = 7, h = 2, d = 3;
  AttentionOptions o;
  o.causal = true;
  o.causal_offset = S - T;
  o.key_padding_mask = padding_mask(B, S, {{1}, {}});
  // kv: [B*S, 2*h*d] = per row the h keys then the h values; k, v: [B, h, S, d] views of it.
  auto heads = [&](const Tensor& kv, int64_t first) {
    return kv.narrow(1, first, h * d).view({B, S, h, d}).permute({0, 2, 1, 3});
  };
  Tensor q = param({B, h, T, d}, 50), seed = random({B, h, T, d}, 51);
  Tensor kv = param({B * S, 2 * h * d}, 52);
  REQUIRE(heads(kv, 0).strides() == Strides{S * 2 * h * d, d, 2 * h * d, 1});
  Tensor strided = attention(q, heads(kv, 0), heads(kv, h * d), o);
  strided.backward(seed);
  const Tensor strided_dq = q.grad(), strided_dkv = kv.grad();
  q.zero_grad(), kv.zero_grad();
  Tensor copied = attention(q, heads(kv, 0).contiguous(), heads(kv, h * d).contiguous(), o);
  copied.backward(seed);
  CHECK_CLOSE(strided, copied, 1e-12);
  CHECK_CLOSE(strided_dq, q.grad(), 1e-12);
  CHECK_CLOSE(strided_dkv, kv.grad(), 1e-12);
  check_gradcheck(
      [&](const std::vector<Tensor>& in) { return attention(in[0], heads(in[1], 0), heads(in[1], h * d), o); },
      {param({B, h, T, d}, 53), param({B * S, 2 * h * d}, 54)});
}

TEST_CASE("attention is bitwise identical for 1 and 2 threads, forward and backward") {
  Tensor q = random({2, 3, 100, 32}, 40, DType::f32).set_requires_grad();  // large enough to run parallel
  Tensor k = random({2, 1, 130, 32}, 41, DType::f32).set_requires_grad();
  Tensor v = random({2, 1, 130, 32}, 42, DType::f32).set_requires_grad();
  Tensor g = random({2, 3, 100, 32}, 43, DType::f32);
  AttentionOptions o;
  o.causal = true;
  o.causal_offset = 30;
  auto run = [&](int threads) {
    set_num_threads(threads);
    q.zero_grad(), k.zero_grad(), v.zero_grad();
    Tensor out = attention(q, k, v, o);
    out.backward(g);
    return std::vector<std::vector<float>>{out.to_vector<float>(), q.grad().to_vector<float>(),
                                           k.grad().to_vector<float>(), v.grad().to_vector<float>()};
  };
  const int previous = num_threads();
  auto one = run(1), two = run(2);
  set_num_threads(previous);
  CHECK(one == two);
}

TEST_CASE("attention f32 gradients agree with f64 on multi-tile shapes") {
  AttentionOptions o;
  o.causal = true;
  o.key_padding_mask = padding_mask(1, 200, {{7, 199}});
  std::vector<std::vector<double>> grads[2];
  for (DType dtype : {DType::f32, DType::f64}) {
    Tensor q = random({1, 2, 200, 32}, 50, dtype).set_requires_grad();
    Tensor k = random({1, 2, 200, 32}, 51, dtype).set_requires_grad();
    Tensor v = random({1, 2, 200, 32}, 52, dtype).set_requires_grad();
    attention(q, k, v, o).backward(random({1, 2, 200, 32}, 53, dtype));
    grads[dtype == DType::f64].push_back(q.grad().to_vector<double>());
    grads[dtype == DType::f64].push_back(k.grad().to_vector<double>());
    grads[dtype == DType::f64].push_back(v.grad().to_vector<double>());
  }
  for (int i = 0; i < 3; ++i) CHECK_CLOSE(grads[0][i], grads[1][i], 2e-5, 1e-4);
}

TEST_CASE("attention matches frozen PyTorch fixtures (causal + padding, h_kv = 1)") {
  testing::Fixture f(HEADROOM_FIXTURES_DIR "/attention.safetensors");
  CHECK(f.metadata("generator").find("torch") != std::string::npos);
  // Inputs are F32; expected values F64, computed by PyTorch in float64 from
  // them.  The f64 kernel must match to rounding, the f32 kernel to f32 accuracy.
  struct Precision {
    DType dtype;
    double atol, rtol;
  };
  for (std::string name : {"padded", "shared_kv"})
    for (Precision prec : {Precision{DType::f64, 1e-12, 1e-10}, Precision{DType::f32, 1e-5, 1e-4}}) {
      CAPTURE(name);
      CAPTURE(prec.dtype);
      Tensor q = f.get(name + ".q").to(prec.dtype).set_requires_grad();
      Tensor k = f.get(name + ".k").to(prec.dtype).set_requires_grad();
      Tensor v = f.get(name + ".v").to(prec.dtype).set_requires_grad();
      AttentionOptions o;
      o.causal = true;
      if (name == "padded") o.key_padding_mask = f.get(name + ".key_padding_mask").to(DType::b8);
      Tensor out = attention(q, k, v, o);
      out.backward(f.get(name + ".grad_out").to(prec.dtype));
      CHECK_CLOSE(out, f.get(name + ".out"), prec.atol, prec.rtol);
      CHECK_CLOSE(q.grad(), f.get(name + ".dq"), prec.atol, prec.rtol);
      CHECK_CLOSE(k.grad(), f.get(name + ".dk"), prec.atol, prec.rtol);
      CHECK_CLOSE(v.grad(), f.get(name + ".dv"), prec.atol, prec.rtol);
    }
}

TEST_CASE("attention errors: shapes, dtypes, h_kv, mask, options, plan") {
  Tensor q = Tensor::zeros({2, 4, 3, 8}), k = Tensor::zeros({2, 4, 5, 8}), v = Tensor::zeros({2, 4, 5, 8});
  CHECK_THROWS_HEADROOM(attention(Tensor::zeros({4, 3, 8}), k, v), "[attention] expected q of shape [B, h, T, d_h]");
  CHECK_THROWS_HEADROOM(attention(q, Tensor::zeros({2, 2, 5, 8}), Tensor::zeros({2, 2, 5, 8})),
                        "must have h_kv == h (4) or 1 heads, got h_kv = 2");
  CHECK_THROWS_HEADROOM(attention(q, Tensor::zeros({2, 4, 5, 7}), v), "expected k of shape [B=2, h_kv, S, d_h=8]");
  CHECK_THROWS_HEADROOM(attention(q, Tensor::zeros({3, 4, 5, 8}), v), "expected k of shape [B=2");
  CHECK_THROWS_HEADROOM(attention(q, k, Tensor::zeros({2, 4, 6, 8})), "expected v of the shape of k");
  CHECK_THROWS_HEADROOM(attention(q, k.to(DType::f64), v), "expected k of dtype f32, got f64");
  CHECK_THROWS_HEADROOM(attention(q.to(DType::i32), k, v), "expected q of dtype f32 or f64");
  AttentionOptions o;
  o.key_padding_mask = Tensor::zeros({2, 5});
  CHECK_THROWS_HEADROOM(attention(q, k, v, o), "expected key_padding_mask of dtype b8");
  o.key_padding_mask = Tensor::zeros({2, 4}, DType::b8);
  CHECK_THROWS_HEADROOM(attention(q, k, v, o), "expected key_padding_mask of shape [B=2, S=5]");
  AttentionOptions drop;
  drop.dropout = 1.0;
  CHECK_THROWS_HEADROOM(attention(q, k, v, drop), "dropout must be in [0, 1)");

  RoutePlan plan = plan_of({0, 1, 2, 3, 0, 1}, 1, 4);  // 6 tokens = B*T with T = 3
  CHECK_THROWS_HEADROOM(routed_attention(Tensor::zeros({5, 8}), k, v, plan, 3),
                        "expected q_rows of shape [plan.rows()=6, d_h]");
  CHECK_THROWS_HEADROOM(routed_attention(Tensor::zeros({6, 8}), k, v, plan, 2), "plan has 6 tokens but B*T = 2*2");
  CHECK_THROWS_HEADROOM(
      routed_attention(Tensor::zeros({6, 8}), Tensor::zeros({2, 3, 5, 8}), Tensor::zeros({2, 3, 5, 8}), plan, 3),
      "[routed_attention] k and v must have h_kv == h (4) or 1");
  CHECK(routed_attention(Tensor::zeros({6, 8}), k, v, plan, 3).shape() == Shape{6, 8});
}
