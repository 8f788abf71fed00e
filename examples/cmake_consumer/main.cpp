// A downstream program: a 2-layer MLP learns y = x0 * x1 (a non-linear
// target) for a few hundred steps, using only <headroom/headroom.h>.
#include <headroom/headroom.h>

#include <cstdio>

using namespace headroom;

int main() {
  try {
    Generator gen(7);
    Tensor x = Tensor::rand({256, 2}, gen, DType::f32, -1, 1);
    Tensor y = x.select(1, 0) * x.select(1, 1);  // [256]
    Linear hidden(2, 32, true, gen), out(32, 1, true, gen);
    std::vector<Tensor> params = hidden.parameters();
    for (const Tensor& p : out.parameters()) params.push_back(p);
    Adam opt(params, 1e-2);
    double first = 0, last = 0;
    for (int step = 0; step < 300; ++step) {
      opt.zero_grad();
      Tensor prediction = out.forward(tanh(hidden.forward(x))).squeeze(1);
      Tensor loss = mean((prediction - y) * (prediction - y));
      loss.backward();
      opt.step();
      (step == 0 ? first : last) = loss.item();
    }
    std::printf("consumer_mlp: headroom %s, mse %.5f -> %.5f\n", HEADROOM_VERSION, first, last);
    return last < first / 10 ? 0 : 1;
  } catch (const Error& e) {
    std::fprintf(stderr, "error: %s\n", e.what());
    return 1;
  }
}
