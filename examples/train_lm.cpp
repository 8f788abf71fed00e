// train_lm: a byte-level decoder-only language model with MHA, MoA, MoH or
// MAE attention.  Default data: Debian's fortunes (scripts/fetch-data).
//
//   train_lm --attn moh --attn-opt shared_heads=2,routed_k=4 --steps 2000 --ckpt runs/lm-moh
//   train_lm --ckpt runs/lm-moh --resume            # continue after Ctrl-C
//   train_lm --ckpt runs/lm-moh --eval-only --generate 300
#include "headroom/examples/common/lm_task.h"

using namespace headroom;
using namespace headroom::examples;

int main(int argc, char** argv) {
  LmOptions lm;
  ModelOptions model;
  TrainOptions train_options;
  set_lm_defaults(model, train_options);
  Flags flags("train_lm", "a byte-level language model (MHA, MoA, MoH or MAE attention)");
  add_lm_flags(flags, lm);
  add_model_flags(flags, model, ModelStacks::decoder);
  add_train_flags(flags, train_options);
  return training_main(
      flags, train_options, argc, argv, [&] { return run_lm(lm, model, train_options); },
      [&] { settle_lm_options(flags, lm, train_options); });
}
