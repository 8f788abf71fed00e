// A 2-layer MLP learns y = x0 * x1, on a GPU when one is present and the program links headroom::cuda.
#include <headroom/headroom.h>

#include <cstdio>

using namespace headroom;

int main() try {
  const Device device = device_count(Device::Kind::cuda) > 0 ? Device::cuda() : Device::cpu();
  Generator gen(7);
  Tensor x = Tensor::rand({256, 2}, gen, -1, 1, DType::f32);
  Tensor y = (x.select(1, 0) * x.select(1, 1)).to(device);  // [256]
  x = x.to(device);
  Linear hidden(2, 32, /*bias=*/true, gen), out(32, 1, /*bias=*/true, gen);
  hidden.to(device);
  out.to(device);
  std::vector<Tensor> params = hidden.parameters();
  for (const Tensor& p : out.parameters()) params.push_back(p);
  Adam opt(params, 1e-2);
  double first = 0, last = 0;
  for (int step = 0; step < 300; ++step) {
    opt.zero_grad();
    Tensor error = out.forward(tanh(hidden.forward(x))).squeeze(1) - y;
    Tensor loss = mean(error * error);
    loss.backward();
    opt.step();
    (step == 0 ? first : last) = loss.item();
  }
  std::printf("headroom %s on %s: mse %.5f -> %.5f\ncuda: %s\n", HEADROOM_VERSION, device.str().c_str(), first, last,
              device_summary(Device::Kind::cuda).c_str());
  return last < first / 10 ? 0 : 1;
} catch (const Error& e) {
  std::fprintf(stderr, "error: %s\n", e.what());
  return 1;
}
