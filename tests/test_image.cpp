// Images: PNG round trips through stb, bilinear resizing, and errors.
#include <unistd.h>

#include <cstdio>
#include <filesystem>
#include <fstream>

#include "headroom/core/image.h"
#include "helpers.h"

using namespace headroom;

namespace {
std::string temp_file(const std::string& name) { return "/tmp/headroom_" + std::to_string(getpid()) + "_" + name; }
}  // namespace

TEST_CASE("image: save_png then load_image round trips within 1/255") {
  Generator gen(11);
  for (int64_t channels : {1, 2, 3, 4}) {
    CAPTURE(channels);
    Tensor image = Tensor::rand({5, 7, channels}, gen);
    std::string path = temp_file("roundtrip.png");
    save_png(path, image);
    Tensor loaded = load_image(path);
    std::remove(path.c_str());
    CHECK(loaded.shape() == image.shape());
    CHECK(loaded.dtype() == DType::f32);
    CHECK_CLOSE(loaded, image, 0.5 / 255 + 1e-6);
  }
}

TEST_CASE("image: grey [H, W] images, channel conversion and clamping") {
  std::string path = temp_file("grey.png");
  Tensor grey = Tensor::from_vector<double>({-0.5, 0, 0.2, 1, 1.5, 0.6}, {2, 3});  // f64, out-of-range values
  save_png(path, grey);
  Tensor loaded = load_image(path);
  CHECK(loaded.shape() == Shape{2, 3, 1});
  CHECK_CLOSE(loaded.reshape({2, 3}), Tensor::from_vector<double>({0, 0, 51 / 255.0, 1, 1, 153 / 255.0}, {2, 3}), 1e-6);
  Tensor rgb = load_image(path, 3);  // grey expanded to three equal channels
  CHECK(rgb.shape() == Shape{2, 3, 3});
  CHECK_CLOSE(rgb.select(2, 0), rgb.select(2, 2), 0);
  CHECK_CLOSE(rgb.select(2, 1), loaded.select(2, 0), 0);
  std::remove(path.c_str());
}

TEST_CASE("image: save_png replaces a file whole and leaves no temporary file behind") {
  const std::filesystem::path folder = temp_file("png_folder");
  std::filesystem::create_directories(folder);
  const std::string path = (folder / "picture.png").string();
  save_png(path, Tensor::zeros({3, 4, 3}));
  save_png(path, Tensor::ones({5, 2, 3}));  // over the old file
  CHECK(load_image(path).shape() == Shape{5, 2, 3});
  CHECK(std::distance(std::filesystem::directory_iterator(folder), std::filesystem::directory_iterator()) == 1);
  std::filesystem::remove_all(folder);
}

TEST_CASE("image: load and save errors name the path and the reason") {
  const std::string missing = temp_file("does_not_exist.png");
  CHECK_THROWS_HEADROOM(load_image(missing), ("cannot load " + missing + ": can't fopen").c_str());
  std::string text = temp_file("not_an_image.png");
  std::ofstream(text) << "hello, not a picture";
  CHECK_THROWS_HEADROOM(load_image(text), "unknown image type");
  std::remove(text.c_str());
  CHECK_THROWS_HEADROOM(load_image(missing, 5), "channels must be 0 (as in the file) or 1..4, got 5");
  CHECK_THROWS_HEADROOM(save_png("/nonexistent_folder/x.png", Tensor::zeros({2, 2})),
                        "cannot create the temporary file /nonexistent_folder/x.png.tmp.");
  CHECK_THROWS_HEADROOM(save_png(temp_file("bad.png"), Tensor::zeros({2, 2, 5})), "with C = 1..4, got (2,2,5)");
  CHECK_THROWS_HEADROOM(save_png(temp_file("bad.png"), Tensor::zeros({2, 2}, DType::i32)),
                        "expected image of dtype f32 or f64, got i32");
  CHECK_THROWS_HEADROOM(save_png(temp_file("bad.png"), Tensor::zeros({0, 2})), "is empty");
}

TEST_CASE("image: bilinear resize matches PyTorch's interpolate (align_corners=False)") {
  // Values printed by torch.nn.functional.interpolate(mode="bilinear", align_corners=False).
  Tensor small = Tensor::from_vector<float>({0, 1, 2, 3}, {2, 2});
  CHECK_CLOSE(resize_image(small, 4, 4),
              Tensor::from_vector<float>(
                  {0, 0.25, 0.75, 1, 0.5, 0.75, 1.25, 1.5, 1.5, 1.75, 2.25, 2.5, 2, 2.25, 2.75, 3}, {4, 4}),
              1e-6);
  CHECK_CLOSE(resize_image(small, 3, 2), Tensor::from_vector<float>({0, 1, 1, 2, 2, 3}, {3, 2}), 1e-6);
  // Halving averages each 2x2 block.
  CHECK_CLOSE(resize_image(Tensor::arange(16).reshape({4, 4}), 2, 2),
              Tensor::from_vector<float>({2.5, 4.5, 10.5, 12.5}, {2, 2}), 1e-6);
}

TEST_CASE("image: resize keeps channels separate, the dtype, and the identity size") {
  Generator gen(5);
  Tensor image = Tensor::rand({3, 4, 2}, gen, DType::f64);
  Tensor same = resize_image(image.permute({1, 0, 2}).permute({1, 0, 2}), 3, 4);  // strided input
  CHECK(same.dtype() == DType::f64);
  CHECK_CLOSE(same, image, 1e-12);
  Tensor up = resize_image(image, 6, 8);
  CHECK(up.shape() == Shape{6, 8, 2});
  for (int64_t c = 0; c < 2; ++c)  // each channel resized on its own
    CHECK_CLOSE(up.select(2, c), resize_image(image.select(2, c), 6, 8), 1e-12);
  CHECK_THROWS_HEADROOM(resize_image(image, 0, 4), "cannot resize shape (3,4,2) to 0x4");
  CHECK_THROWS_HEADROOM(resize_image(Tensor::zeros({4}), 2, 2), "expected [H, W] or [H, W, C]");
}
