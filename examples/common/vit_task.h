#pragma once
// train_vit's task: image classification with a ViT whose encoder attention
// is MHA, MoA, MoH or MAE.  Default data: Fashion-MNIST from Debian's
// dataset-fashion-mnist (scripts/fetch-data unpacks it to data/fashion-mnist/):
// 60k training images (5k split off for validation, seeded) and the official
// 10k test images.  --images DIR reads a folder of class subfolders of
// PNG/JPEG files instead (resized to --image-size; 10% validation, 10% test).
//
// Pixels are normalised with the training set's per-channel mean and standard
// deviation.  Each epoch visits the training images in a permutation drawn
// from (seed, epoch), so the batch of a step is a pure function of the step.
// Reports accuracy and loss, and at the end the test accuracy, the confusion
// matrix (printed, confusion.csv, confusion.png) and, for routed attention,
// the routing report of the test images (write_routing_report: routing.json,
// routing.csv, load.png, load_heatmap.png, gates.png) and the head/expert
// load of every layer per class (load_by_class.png, routing_by_class.csv).
#include <cstdint>
#include <string>

#include "headroom/examples/common/cli.h"
#include "headroom/examples/common/model_options.h"
#include "headroom/examples/common/run_summary.h"
#include "headroom/examples/common/trainer.h"

namespace headroom::examples {

struct VitOptions {
  std::string data = "data/fashion-mnist";  // the four IDX files (uncompressed)
  std::string images;                       // a folder of class subfolders instead
  int64_t image_size = 32;                  // --images: resize to this
  int64_t channels = 3;                     // --images: 1 (grey) or 3 (RGB)
  int64_t patch = 4;
  int64_t batch = 64;
  int64_t epochs = 0;           // > 0 instead of --steps: epochs over the training set
  int64_t valid_images = 5000;  // Fashion-MNIST: split off the training set
  int64_t eval_images = 2000;   // validation images per periodic evaluation (0: all)
};

void add_vit_flags(Flags& flags, VitOptions& options);

// For --resume and --eval-only with --images: --image-size and --channels
// become the checkpoint's model's unless given; a different value is refused
// (settle_trained_value), as the patch grid and the input layer are fixed.
void settle_vit_options(const Flags& flags, VitOptions& vit, const TrainOptions& train);

RunSummary run_vit(const VitOptions& vit, const ModelOptions& model, const TrainOptions& train_options);

// train_vit's and compare --task vit's defaults, sized like set_lm_defaults.
void set_vit_defaults(ModelOptions& model, TrainOptions& train);

}  // namespace headroom::examples
