#pragma once
// Whether ops record the graph.  Thread-local, on by default.  NoGradGuard
// turns recording off for a scope: evaluation, inference, optimizer updates,
// and the backward pass itself (headroom has no double backward).  It lives in
// core because in-place tensor writes check it (core/tensor.cpp).
namespace headroom::autograd {

bool grad_enabled();
void set_grad_enabled(bool enabled);

class NoGradGuard {
 public:
  NoGradGuard() : previous_(grad_enabled()) { set_grad_enabled(false); }
  ~NoGradGuard() { set_grad_enabled(previous_); }
  NoGradGuard(const NoGradGuard&) = delete;
  NoGradGuard& operator=(const NoGradGuard&) = delete;

 private:
  bool previous_;
};

}  // namespace headroom::autograd

namespace headroom {
using autograd::NoGradGuard;
}
