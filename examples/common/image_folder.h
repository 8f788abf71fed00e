#pragma once
// A labelled image dataset from a folder with one subfolder per class, as
// torchvision's ImageFolder reads it:
//
//   photos/cat/1.png  photos/cat/2.jpg  photos/dog/a.bmp ...
//   ImageDataset data = load_image_folder("photos", 32, 3);   // [N, 3, 32, 32]
//   ImageDataset valid = split_off(data, 0.1, 1234);           // idx.h
#include <cstdint>
#include <string>

#include "headroom/examples/common/idx.h"

namespace headroom::examples {

// Class ids follow the sorted subfolder names.  Every regular file ending in
// .png, .jpg, .jpeg or .bmp (any case) is read with load_image as `channels`
// channels (1..4) and resized (bilinear) to size x size, so the images may
// have mixed sizes.  Other entries (files of other extensions, FIFOs, which
// are never opened, nested folders, files beside the class folders) are
// skipped, and one line on stdout says how many and names one.  Images are
// ordered by class, then by sorted file name.  Throws for a missing folder, a
// folder without class subfolders, a class without images (with what it
// holds instead), and an unreadable image (naming the file).
ImageDataset load_image_folder(const std::string& dir, int64_t size, int channels);

// The images load_image_folder would read from `dir`, counted without
// opening them (for the memory estimate); 0 for a folder it cannot list.
int64_t count_image_files(const std::string& dir);

}  // namespace headroom::examples
