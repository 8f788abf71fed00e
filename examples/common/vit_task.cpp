#include "headroom/examples/common/vit_task.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <sstream>

#include "headroom/core/grad_mode.h"
#include "headroom/core/atomic_file.h"
#include "headroom/examples/common/idx.h"
#include "headroom/examples/common/image_folder.h"
#include "headroom/examples/common/plot.h"
#include "headroom/examples/common/report.h"
#include "headroom/models/stats.h"
#include "headroom/models/transformer.h"
#include "headroom/ops/elementwise.h"
#include "headroom/ops/nn.h"
#include "headroom/ops/reduce.h"
#include "headroom/ops/routing.h"

namespace headroom::examples {

namespace {

struct ImageSplits {
  ImageDataset train, valid, test;
};

// The [C, H, W] of a dataset's images.
Shape image_shape(const ImageDataset& data) {
  const Shape& shape = data.images.shape();
  return Shape(shape.begin() + 1, shape.end());
}

ImageSplits load_images(const VitOptions& vit, uint64_t seed) {
  ImageSplits splits;
  if (!vit.images.empty()) {
    splits.train = load_image_folder(vit.images, vit.image_size, int(vit.channels));
    splits.test = split_off(splits.train, 0.1, seed + 1);
    splits.valid = split_off(splits.train, 0.1 / 0.9, seed + 2);
    return splits;
  }
  const std::string& d = vit.data;
  const std::string train_images = d + "/train-images-idx3-ubyte", test_images = d + "/t10k-images-idx3-ubyte";
  splits.train = load_idx_dataset(train_images, d + "/train-labels-idx1-ubyte", fashion_mnist_classes());
  splits.test = load_idx_dataset(test_images, d + "/t10k-labels-idx1-ubyte", fashion_mnist_classes());
  // Found here rather than when the model meets the test set after training.
  HEADROOM_CHECK(image_shape(splits.test) == image_shape(splits.train), "[train_vit] ", test_images,
                 " holds images of ", shape_str(image_shape(splits.test)), " (C, H, W) but ", train_images, " holds ",
                 shape_str(image_shape(splits.train)), "; expected the same size");
  const int64_t n = splits.train.images.size(0);
  HEADROOM_CHECK(vit.valid_images < n, "[train_vit] --valid-images ", vit.valid_images, " must be below the ", n,
                 " images of ", train_images);
  splits.valid = split_off(splits.train, double(vit.valid_images) / double(n), seed + 2);
  return splits;
}

// The [C, H, W] of the IDX images at `path` ([N, H, W] or [N, H, W, C]) from
// their header alone, so that the memory is estimated before the images are
// read; zeros for another shape (load_idx_dataset then says why).
Shape idx_image_shape(const std::string& path) {
  const std::vector<int64_t> shape = read_idx_shape(path);
  if (shape.size() != 3 && shape.size() != 4) return {0, 0, 0};
  return {shape.size() == 4 ? shape[3] : 1, shape[1], shape[2]};
}

// The model config of a ViT run before its images are read, and its tokens
// per image: patches, and the class token.
std::pair<ModelConfig, int64_t> planned_config(const ModelSource& source, const VitOptions& vit) {
  ModelConfig c = source.config;
  if (!source.from_checkpoint && !vit.images.empty()) {
    c.image_size = vit.image_size, c.channels = vit.channels, c.patch_size = vit.patch;
    std::error_code ignored;  // load_image_folder names a folder it cannot read
    for (const auto& entry : std::filesystem::directory_iterator(vit.images, ignored))
      c.classes += entry.is_directory(ignored);
  } else if (!source.from_checkpoint) {
    const Shape chw = idx_image_shape(vit.data + "/train-images-idx3-ubyte");
    c.channels = chw[0], c.image_size = chw[1], c.patch_size = vit.patch;
    c.classes = int64_t(fashion_mnist_classes().size());
  }
  const int64_t side = c.image_size / c.patch_size;
  return {c, side * side + (c.pooling == Pooling::cls ? 1 : 0)};
}

// The images a ViT run reads: the training (with validation) and test IDX
// files' counts from their headers, or the image files of --images.
int64_t image_count(const VitOptions& vit) {
  if (!vit.images.empty()) return count_image_files(vit.images);
  int64_t count = 0;
  for (const char* part : {"/train-images-idx3-ubyte", "/t10k-images-idx3-ubyte"}) {
    const std::vector<int64_t> shape = read_idx_shape(vit.data + part);
    count += shape.empty() ? 0 : shape[0];
  }
  return count;
}

// The batches of a ViT run, --batch images of `tokens` positions in training
// and evaluation, and on the CPU its images: every image as f32 pixels with
// its i32 label, held beside the model for the whole run.
RunShape vit_shape(const VitOptions& vit, const ModelConfig& c, int64_t tokens, const TrainOptions& options) {
  RunShape shape;
  shape.rows = vit.batch;
  shape.eval_rows = vit.batch;
  shape.tokens = tokens;
  const double pixels = double(c.channels * c.image_size * c.image_size);
  if (Device::parse(options.device).is_cpu()) shape.data_bytes = 4 * double(image_count(vit)) * (pixels + 1);
  return shape;
}

// Per-channel mean and standard deviation of images [N, C, H, W] -> [1, C, 1, 1] each.
std::pair<Tensor, Tensor> channel_statistics(const Tensor& images) {
  Tensor mu = mean(images, {0, 2, 3}, true);
  Tensor sigma = sqrt(mean(pow(sub(images, mu), 2.0), {0, 2, 3}, true));
  return {mu, add(sigma, 1e-6)};
}

// The routing statistics of the test images: all of them, and per true class.
struct ImageRouting {
  RoutingRecorder all;
  std::vector<RoutingRecorder> per_class;
};

class VitTask : public ModelTask<ViT> {
 public:
  VitTask(const VitOptions& vit, const ModelSource& source, uint64_t seed) : ModelTask(source.config, seed), vit_(vit) {
    data_ = load_images(vit, seed);
    auto [mu, sigma] = channel_statistics(data_.train.images);
    for (ImageDataset* part : {&data_.train, &data_.valid, &data_.test})
      part->images = div(sub(part->images, mu), sigma).contiguous();
    const Tensor& images = data_.train.images;
    HEADROOM_CHECK(images.size(2) == images.size(3), "[train_vit] the images are ", images.size(2), "x", images.size(3),
                   " pixels; the ViT expects square images");
    ModelConfig from_data = config_;
    from_data.image_size = images.size(2);
    from_data.channels = images.size(1);
    from_data.classes = int64_t(data_.train.class_names.size());
    if (source.from_checkpoint) check_data_fits(from_data);
    else config_ = from_data, config_.patch_size = vit.patch;
    build_model();  // checks that the patch size divides the image size
    const int64_t patches_per_side = config_.image_size / config_.patch_size;
    check_product("--batch", vit.batch, "patches per image", patches_per_side * patches_per_side, kMaxBatchTokens,
                  "tokens per batch");
  }

  // A checkpoint's model takes images of its size, channels and classes only.
  void check_data_fits(const ModelConfig& from_data) const {
    const std::string data = vit_.images.empty() ? vit_.data : vit_.images;
    HEADROOM_CHECK(from_data.image_size == config_.image_size && from_data.channels == config_.channels &&
                       from_data.classes == config_.classes,
                   "[train_vit] ", data, " holds ", from_data.classes, " classes of ", from_data.channels, "x",
                   from_data.image_size, "x", from_data.image_size, " images; the checkpoint's model takes ",
                   config_.classes, " classes of ", config_.channels, "x", config_.image_size, "x", config_.image_size);
  }

  std::string unit() const override { return "img"; }
  const ImageSplits& data() const { return data_; }

  std::string data_digest() const override {
    std::vector<Tensor> tensors;  // on the CPU, where the task keeps its data
    for (const ImageDataset* part : {&data_.train, &data_.valid, &data_.test})
      tensors.insert(tensors.end(), {part->images.contiguous(), part->labels.contiguous()});
    std::vector<std::pair<const void*, size_t>> parts;
    for (const Tensor& t : tensors) parts.emplace_back(t.raw_data(), size_t(t.numel()) * dtype_size(t.dtype()));
    return std::to_string(data_.train.images.size(0)) + " training, " + std::to_string(data_.valid.images.size(0)) +
           " validation and " + std::to_string(data_.test.images.size(0)) + " test images, " + crc32_text(parts);
  }
  int64_t steps_per_epoch() const {
    const int64_t n = data_.train.images.size(0);
    return n / vit_.batch + (n % vit_.batch != 0);  // ceil(n / batch) without n + batch overflowing
  }

  int64_t batch_rows(int64_t step) const override {
    return std::min(vit_.batch, data_.train.images.size(0) - first_row(step));  // an epoch's last batch may be short
  }

  StepOutput step(int64_t step, BatchSlice slice) override {
    Tensor rows = epoch_rows(step, slice);
    ModelOutput out = model_->forward(on_model_device(index_select(data_.train.images, 0, rows)));
    Tensor loss = cross_entropy(out.out, on_model_device(index_select(data_.train.labels, 0, rows)));
    return {training_loss(loss, out.aux_losses, rows.numel()), loss.item(), rows.numel()};
  }

  Metrics evaluate() override {
    int64_t n = data_.valid.images.size(0);
    if (vit_.eval_images > 0) n = std::min(n, vit_.eval_images);
    Scores s = score(data_.valid, n, nullptr);
    return {{"accuracy", s.accuracy}, {"loss", s.loss}};
  }

  struct Scores {
    double loss = 0, accuracy = 0;
    std::vector<std::vector<int64_t>> confusion;  // [true class][predicted class]
  };

  // Loss, accuracy and confusion matrix over the first n images; with
  // routing, the routing statistics of all of them and of each true class.
  Scores score(const ImageDataset& part, int64_t n, ImageRouting* routing) {
    const int64_t classes = config_.classes;
    Scores s;
    s.confusion.assign(size_t(classes), std::vector<int64_t>(size_t(classes), 0));
    double loss_sum = 0;
    for (int64_t first = 0; first < n; first += vit_.batch) {
      int64_t count = std::min(vit_.batch, n - first);
      ModelOutput out = model_->forward(on_model_device(part.images.narrow(0, first, count)));
      Tensor labels = part.labels.narrow(0, first, count).contiguous();
      loss_sum += cross_entropy(out.out, on_model_device(labels)).item() * double(count);
      std::vector<int32_t> truth = labels.to_vector<int32_t>(), predicted = argmax(out.out, 1).to_vector<int32_t>();
      for (int64_t i = 0; i < count; ++i) s.confusion[size_t(truth[i])][size_t(predicted[i])] += 1;
      if (routing) record_routing(out.stats, truth, *routing);
    }
    int64_t correct = 0;
    for (int64_t c = 0; c < classes; ++c) correct += s.confusion[size_t(c)][size_t(c)];
    s.loss = loss_sum / double(n);
    s.accuracy = double(correct) / double(n);
    return s;
  }

 private:
  // Where `step`'s batch starts in its epoch's permutation.
  int64_t first_row(int64_t step) const { return (step % steps_per_epoch()) * vit_.batch; }

  // Rows of the training set for `step`'s `slice`: a part of epoch e's permutation.
  Tensor epoch_rows(int64_t step, BatchSlice slice) {
    const int64_t epoch = step / steps_per_epoch(), n = data_.train.images.size(0);
    if (epoch != permutation_epoch_) {
      Generator shuffle(seed_ ^ 0xe90c4ULL);
      shuffle.set_state(shuffle.seed(), uint64_t(epoch) * uint64_t(n));
      permutation_.resize(size_t(n));
      for (int64_t i = 0; i < n; ++i) permutation_[size_t(i)] = int32_t(i);
      for (int64_t i = n - 1; i > 0; --i)
        std::swap(permutation_[size_t(i)], permutation_[size_t(shuffle.next_int(i + 1))]);
      permutation_epoch_ = epoch;
    }
    const int64_t first = first_row(step);
    return Tensor::from_vector(
        std::vector<int32_t>(permutation_.begin() + first + slice.begin, permutation_.begin() + first + slice.end));
  }

  // Records a batch's routing statistics, all of them and split by the
  // images' classes.  Rows of stats are (image, token) pairs, image-major.
  void record_routing(const std::vector<RoutingStats>& stats, const std::vector<int32_t>& truth,
                      ImageRouting& routing) const {
    auto routed = std::find_if(stats.begin(), stats.end(), [](const RoutingStats& s) { return s.gates.defined(); });
    if (routed == stats.end()) return;  // dense layers only
    routing.all.add(stats);
    const int64_t images = int64_t(truth.size()), tokens = routed->gates.size(0) / images;
    for (int64_t c = 0; c < config_.classes; ++c) {
      std::vector<uint8_t> valid(size_t(images * tokens), 0);
      for (int64_t i = 0; i < images; ++i)
        if (truth[size_t(i)] == c) std::fill_n(valid.begin() + i * tokens, tokens, uint8_t(1));
      routing.per_class[size_t(c)].add(stats, Tensor(), Tensor::from_vector(valid));
    }
  }

  VitOptions vit_;
  ImageSplits data_;
  std::vector<int32_t> permutation_;
  int64_t permutation_epoch_ = -1;
};

std::string confusion_text(const std::vector<std::vector<int64_t>>& confusion, const std::vector<std::string>& names) {
  std::ostringstream out;
  out << "true \\ predicted";
  for (size_t c = 0; c < names.size(); ++c) out << "," << c;
  out << "\n";
  for (size_t r = 0; r < confusion.size(); ++r) {
    out << r << " " << names[r];
    for (int64_t count : confusion[r]) out << "," << count;
    out << "\n";
  }
  return out.str();
}

// Row-normalised confusion matrix as a heat map (rows: true classes).
void plot_confusion(const std::string& path, const std::vector<std::vector<int64_t>>& confusion,
                    const std::vector<std::string>& names) {
  Heatmap heat;
  heat.title = "test confusion matrix (share of each true class)";
  heat.row_label = "true class", heat.col_label = "predicted class";
  heat.rows = names;
  for (size_t c = 0; c < names.size(); ++c) heat.cols.push_back(std::to_string(c));
  for (const auto& row : confusion) {
    int64_t total = 0;
    for (int64_t count : row) total += count;
    std::vector<double> shares;
    for (int64_t count : row) shares.push_back(total > 0 ? double(count) / double(total) : 0.0);
    heat.values.push_back(shares);
  }
  plot_heatmap(path, heat);
}

}  // namespace

void add_vit_flags(Flags& flags, VitOptions& o) {
  const Range<int64_t> image_count{0, int64_t(1) << 31};
  flags.add("data", &o.data, "folder with Fashion-MNIST's four IDX files (scripts/fetch-data)");
  flags.add("images", &o.images, "a folder of class subfolders of PNG/JPEG images instead");
  flags.add("image-size", &o.image_size, "--images: resize to this many pixels square", {1, kMaxImageSize});
  flags.add("channels", &o.channels, "--images: 1 (grey), 2 (grey, alpha), 3 (RGB) or 4 (RGBA)", {1, 4});
  flags.add("patch", &o.patch, "patch size in pixels", {1, kMaxImageSize});
  flags.add("batch", &o.batch, "images per step", {1, kMaxBatch});
  flags.add("epochs", &o.epochs, "train for this many epochs (instead of --steps; 0: use --steps)", {0, 1'000'000});
  flags.add("valid-images", &o.valid_images, "Fashion-MNIST: training images split off for validation",
            {1, image_count.max});
  flags.add("eval-images", &o.eval_images, "validation images per periodic evaluation (0: all)", image_count);
}

void settle_vit_options(const Flags& flags, VitOptions& vit, const TrainOptions& train) {
  if ((!train.resume && !train.eval_only) || vit.images.empty()) return;  // IDX files fix their own size
  const ModelConfig trained = checkpoint_config(train, ModelStacks::encoder);
  settle_trained_value(flags, train, "image-size", vit.image_size, trained.image_size, EvalAccepts::trained_only);
  settle_trained_value(flags, train, "channels", vit.channels, trained.channels, EvalAccepts::trained_only);
}

RunSummary run_vit(const VitOptions& vit, const ModelOptions& model_options, const TrainOptions& options) {
  HEADROOM_CHECK(vit.batch > 0 && vit.patch > 0, "[train_vit] --batch and --patch must be positive");
  if (vit.images.empty()) check_data_exists("--data", vit.data, "vit");
  const ModelSource source = model_source(model_options, options, ModelStacks::encoder);
  if (source.from_checkpoint && model_options.given("patch") && vit.patch != source.config.patch_size)
    throw UsageError("--patch " + std::to_string(vit.patch) + " contradicts the checkpoint: its model.patch_size is " +
                     std::to_string(source.config.patch_size) + "; drop the flag");
  const auto [planned, tokens] = planned_config(source, vit);
  const MemoryEstimate estimate = estimate_memory(planned, vit_shape(vit, planned, tokens, options));
  start_run(options, planned, estimate);
  VitTask task(vit, source, options.seed);
  const ImageSplits& data = task.data();
  std::printf("data: %s train / %s valid / %s test images of %lldx%lld, %lld classes\n",
              format_count(data.train.images.size(0)).c_str(), format_count(data.valid.images.size(0)).c_str(),
              format_count(data.test.images.size(0)).c_str(), (long long)task.config().image_size,
              (long long)task.config().image_size, (long long)task.config().classes);
  const double macs_per_image = double(task.typed_model().forward_macs());
  std::printf("%s\n", model_summary(summarize("vit", task.model(), task.config(), options, {}, macs_per_image),
                                    task.typed_model().describe())
                          .c_str());
  TrainOptions o = options;
  if (vit.epochs > 0) {
    o.steps = vit.epochs * task.steps_per_epoch();
    settle_schedule(model_options.flags, o);
  }
  TrainResult result = train(task, o);

  NoGradGuard no_grad;
  task.model().eval();
  ImageRouting routing;
  routing.per_class.resize(size_t(task.config().classes));
  auto test = task.score(data.test, data.test.images.size(0), &routing);
  std::printf("test: accuracy %s, loss %s\nconfusion matrix:\n%s", format_metric("accuracy", test.accuracy).c_str(),
              format_metric("loss", test.loss).c_str(), confusion_text(test.confusion, data.test.class_names).c_str());
  result.eval.emplace_back("test_accuracy", test.accuracy);
  if (writes_run_files(o)) {
    write_file_atomically(o.ckpt_dir + "/confusion.csv", confusion_text(test.confusion, data.test.class_names),
                          "train_vit");
    const std::string label = o.ckpt_dir + ", " + task.config().attention.type;
    write_curve_plots(o.ckpt_dir, "accuracy", label);
    plot_confusion(o.ckpt_dir + "/confusion.png", test.confusion, data.test.class_names);
    // Patches have no token ids, so no PMI (no pmi.md).
    write_routing_report(o.ckpt_dir, routing.all, task.model(), {}, label);
    write_class_routing_report(o.ckpt_dir, routing.per_class, data.test.class_names, label);
  }
  RunSummary summary = summarize("vit", task.model(), task.config(), o, result, macs_per_image);
  summary.estimated_bytes = estimate.total();
  return summary;
}

void set_vit_defaults(ModelOptions& model, TrainOptions& train) {
  model.dim = 64, model.heads = 4, model.layers = 2, model.ffn = 128, model.dropout = 0;
  // 860 steps of 64 images: one epoch of the 55k Fashion-MNIST training images.
  train.steps = 860, train.warmup = 50, train.lr = 1e-3, train.weight_decay = 0.05, train.eval_every = 250;
  train.ckpt_dir = "runs/vit";
}

}  // namespace headroom::examples
