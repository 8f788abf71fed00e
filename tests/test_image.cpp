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
  CHECK_THROWS_HEADROOM(load_image(missing), ("cannot open " + missing + ": No such file").c_str());
  std::string text = temp_file("not_an_image.png");
  std::ofstream(text) << "hello, not a picture";
  CHECK_THROWS_HEADROOM(load_image(text), (text + " is not a PNG, JPEG or BMP file").c_str());
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

namespace {

std::string bytes_of(std::initializer_list<int> values) {
  std::string out;
  for (int v : values) out += static_cast<char>(v);
  return out;
}

std::string be16(size_t v) { return bytes_of({int(v >> 8), int(v & 0xFF)}); }
std::string be32(uint32_t v) { return be16(v >> 16) + be16(v & 0xFFFF); }
std::string le32(uint32_t v) {
  return bytes_of({int(v & 0xFF), int(v >> 8 & 0xFF), int(v >> 16 & 0xFF), int(v >> 24)});
}

// A DHT segment of one table: class/id byte, 16 code counts, the values.
std::string dht(int class_id, const std::vector<int>& counts, const std::string& values) {
  std::string body = bytes_of({class_id});
  for (int c : counts) body += static_cast<char>(c);
  return bytes_of({0xFF, 0xC4}) + be16(2 + body.size() + values.size()) + body + values;
}

// A hand-built baseline JPEG of one grey pixel: every coefficient 0 (so the
// pixel is the level shift, 128), Huffman tables of one 1-bit code each.
// `dc_table` replaces the DC table's segment.
std::string one_pixel_jpeg(const std::string& dc_table) {
  std::vector<int> one_code(16, 0);
  one_code[0] = 1;
  return bytes_of({0xFF, 0xD8, 0xFF, 0xDB, 0x00, 0x43, 0x00}) + std::string(64, '\x01') +            // SOI, DQT
         bytes_of({0xFF, 0xC0, 0x00, 0x0B, 0x08, 0x00, 0x01, 0x00, 0x01, 0x01, 0x01, 0x11, 0x00}) +  // SOF0 1x1
         dc_table + dht(0x10, one_code, std::string(1, '\0')) +                                      // DC, AC
         bytes_of({0xFF, 0xDA, 0x00, 0x08, 0x01, 0x01, 0x00, 0x00, 0x3F, 0x00}) +                    // SOS
         bytes_of({0x3F, 0xFF, 0xD9});  // DC category 0, end of block, padding; EOI
}

std::string png_header(uint32_t width, uint32_t height, int colour_type = 0) {
  return "\x89PNG\r\n\x1a\n" + be32(13) + "IHDR" + be32(width) + be32(height) + bytes_of({8, colour_type, 0, 0, 0}) +
         be32(0);
}

// The one-pixel JPEG with its frame header (SOF0, at byte 71) giving another size.
std::string jpeg_of_size(size_t width, size_t height) {
  std::vector<int> one_code(16, 0);
  one_code[0] = 1;
  return one_pixel_jpeg(dht(0x00, one_code, std::string(1, '\0'))).replace(76, 4, be16(height) + be16(width));
}

}  // namespace

TEST_CASE("image: the JPEG and BMP decoders read hand-built files") {
  std::vector<int> one_code(16, 0);
  one_code[0] = 1;
  std::string jpeg = temp_file("one.jpg");
  std::ofstream(jpeg, std::ios::binary) << one_pixel_jpeg(dht(0x00, one_code, std::string(1, '\0')));
  CHECK_CLOSE(load_image(jpeg), Tensor::full({1, 1, 1}, 128 / 255.0), 1e-6);
  // 2x1, 24-bit, bottom-up rows padded to 4 bytes: red, then green (stored B, G, R).
  std::string bmp = temp_file("two.bmp");
  std::ofstream(bmp, std::ios::binary) << "BM" + le32(62) + le32(0) + le32(54) + le32(40) + le32(2) + le32(1) +
                                              bytes_of({1, 0, 24, 0}) + le32(0) + le32(8) + std::string(16, '\0') +
                                              bytes_of({0, 0, 255, 0, 255, 0, 0, 0});
  CHECK_CLOSE(load_image(bmp, 3), Tensor::from_vector<float>({1, 0, 0, 0, 1, 0}, {1, 2, 3}), 1e-6);
  std::remove(jpeg.c_str());
  std::remove(bmp.c_str());
}

TEST_CASE("image: hostile files are refused before stb decodes them") {
  std::string path = temp_file("hostile.png");
  auto load_bytes = [&](const std::string& bytes) {
    std::ofstream(path, std::ios::binary | std::ios::trunc) << bytes;
    return load_image(path);
  };
  // A DHT whose tables declare 654 codes: stb 2.27 writes past its 256-entry arrays.
  std::vector<int> too_many = {0, 0, 3, 0, 0, 0, 0, 0, 0, 0, 0, 99, 99, 99, 99, 255};
  CHECK_THROWS_HEADROOM(
      load_bytes(one_pixel_jpeg(dht(0x00, too_many, std::string(654, '\0')))),
      "is a corrupt JPEG: a Huffman table (DHT at byte 84) has a bad class, id or length, or more than 256 codes");
  std::vector<int> one_code(16, 0);
  one_code[0] = 1;
  CHECK_THROWS_HEADROOM(load_bytes(one_pixel_jpeg(dht(0x24, one_code, std::string(1, '\0')))), "is a corrupt JPEG");
  // A GIF named .png: its decoder is not compiled in.
  CHECK_THROWS_HEADROOM(load_bytes("GIF89a" + std::string(88, '\xff')), "is not a PNG, JPEG or BMP file");
  // Dimensions: a side of 0 or over 16384 (stb's limit), read from the header before stb sees it,
  // then 10000 x 10000 = 10^8 pixels (over 2^24).
  CHECK_THROWS_HEADROOM(load_bytes(png_header(20000, 10)),
                        "is a 20000x10 PNG, past the limit of 16384 pixels per side");
  CHECK_THROWS_HEADROOM(load_bytes(png_header(1, 16385)), "is a 1x16385 PNG, past the limit of 16384 pixels per side");
  CHECK_THROWS_HEADROOM(load_bytes(png_header(0, 5)), ": the PNG header gives width 0");
  CHECK_THROWS_HEADROOM(load_bytes(png_header(5, 0)), ": the PNG header gives height 0");
  CHECK_THROWS_HEADROOM(load_bytes(jpeg_of_size(20000, 10)),
                        "is a 20000x10 JPEG, past the limit of 16384 pixels per side");
  CHECK_THROWS_HEADROOM(load_bytes(jpeg_of_size(0, 1)), ": the JPEG header gives width 0");
  // The same JPEG with the size its data was built for loads.
  CHECK_CLOSE(load_bytes(jpeg_of_size(1, 1)), Tensor::full({1, 1, 1}, 128 / 255.0), 1e-6);
  CHECK_THROWS_HEADROOM(load_bytes(png_header(10000, 10000)),
                        "is 10000x10000, more than the 16777216 pixels an image may have");
  CHECK_THROWS_HEADROOM(load_bytes(png_header(2, 2) + be32(0) + "IDAT" + be32(0)),
                        "is a corrupt PNG: its first IDAT chunk is empty");
  // A palette PNG without its palette; with one, the file gets past the check to stb, which refuses its
  // one-byte image data.
  const std::string idat = be32(1) + "IDAT" + bytes_of({0}) + be32(0);
  const std::string plte = be32(3) + "PLTE" + bytes_of({0, 0, 0}) + be32(0);
  CHECK_THROWS_HEADROOM(load_bytes(png_header(2, 2, 3) + idat),
                        "is a corrupt PNG: a palette PNG (colour type 3) has no PLTE chunk before its image data");
  CHECK_THROWS_HEADROOM(load_bytes(png_header(2, 2, 3) + plte + idat), "cannot load");
  CHECK_THROWS_HEADROOM(load_image("/dev/zero"), "/dev/zero is a character device, expected a regular file");
  std::remove(path.c_str());
}
