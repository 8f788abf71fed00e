// train_vit: image classification with a ViT whose attention is MHA, MoA,
// MoH or MAE.  Default data: Fashion-MNIST (scripts/fetch-data); --images DIR
// for a folder of class subfolders.
//
//   train_vit --attn moh --attn-opt shared_heads=2,routed_k=4 --epochs 5 --ckpt runs/vit-moh
#include "headroom/examples/common/vit_task.h"

using namespace headroom;
using namespace headroom::examples;

int main(int argc, char** argv) {
  VitOptions vit;
  ModelOptions model;
  TrainOptions train_options;
  set_vit_defaults(model, train_options);
  Flags flags("train_vit", "image classification with a ViT (MHA, MoA, MoH or MAE attention)");
  add_vit_flags(flags, vit);
  add_model_flags(flags, model, ModelStacks::encoder);
  add_train_flags(flags, train_options);
  return training_main(
      flags, train_options, argc, argv, [&] { return run_vit(vit, model, train_options); },
      [&] { settle_vit_options(flags, vit, train_options); });
}
