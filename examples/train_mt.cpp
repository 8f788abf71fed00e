// train_mt: English→German translation with an encoder-decoder whose
// attention layers are MHA, MoA, MoH or MAE.  Default data: gettext catalogs
// of Debian packages (scripts/fetch-data); --data FILE.tsv for any corpus.
//
//   train_mt --attn mae --steps 3000 --ckpt runs/mt-mae
//   train_mt --ckpt runs/mt-mae --eval-only --beam 4
#include "headroom/examples/common/mt_task.h"

using namespace headroom;
using namespace headroom::examples;

int main(int argc, char** argv) {
  MtOptions mt;
  ModelOptions model;
  TrainOptions train_options;
  set_mt_defaults(model, train_options);
  Flags flags("train_mt", "English->German translation (MHA, MoA, MoH or MAE attention)");
  add_mt_flags(flags, mt);
  add_model_flags(flags, model, ModelStacks::encoder_decoder);
  add_train_flags(flags, train_options);
  return training_main(
      flags, train_options, argc, argv, [&] { return run_mt(mt, model, train_options); },
      [&] { settle_mt_options(flags, mt, train_options); });
}
