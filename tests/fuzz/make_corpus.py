#!/usr/bin/env python3
"""Writes the seed corpora of the fuzz targets, tests/fuzz/corpus/<target>/:
a few small valid inputs each (and a few near-valid ones), so the fuzzers
start inside each format instead of guessing its magic bytes.  Everything is
built here with the standard library, byte by byte, except the checkpoint
metadata, which is read from safetensors files: the test fixtures and any
checkpoints named on the command line, so the seeds hold the keys the
training binaries really write; a checkpoint of at most 32 KiB is a
safetensors seed too.  The committed corpus was made with the checkpoints of
tiny train_lm, train_mt (MAE, and mixed MoH/MHA) and train_vit runs (two, one
of them with --dim 8 --heads 2 --ffn 8), on the data scripts/smoke-examples
generates:

    python3 tests/fuzz/make_corpus.py RUN/lm/checkpoint.safetensors RUN/mt/checkpoint.safetensors ...
"""
import glob
import hashlib
import json
import os
import shutil
import struct
import sys
import zlib

HERE = os.path.dirname(os.path.abspath(__file__))
FIXTURES = os.path.join(HERE, "..", "fixtures")
MAX_CHECKPOINT_SEED = 32 << 10  # larger checkpoints give metadata seeds only: the corpus stays small


def named_by_content(path, data):
    """The file's name (a checkpoint's: its run folder's) and a hash of the seed."""
    stem = os.path.basename(path).split(".")[0]
    if stem == "checkpoint":  # every run writes RUN/checkpoint.safetensors
        stem = os.path.basename(os.path.dirname(path))
    return stem + "-" + hashlib.sha1(data).hexdigest()[:8]


# ---- safetensors and JSON ------------------------------------------------------

def safetensors(tensors, metadata=None):
    """u64 header length, the JSON header padded with spaces to 8 bytes, the data."""
    header, blobs, offset = {}, b"", 0
    if metadata is not None:
        header["__metadata__"] = metadata
    for name, dtype, shape, data in tensors:
        header[name] = {"dtype": dtype, "shape": shape, "data_offsets": [offset, offset + len(data)]}
        blobs += data
        offset += len(data)
    text = json.dumps(header, separators=(",", ":")).encode()
    text += b" " * (-len(text) % 8)
    return struct.pack("<Q", len(text)) + text + blobs


def safetensors_seeds(checkpoints):
    f32 = struct.pack("<6f", 0.5, -1, 2, 3.25, 0, 1e-3)
    yield "dtypes", safetensors([
        ("b8", "BOOL", [3], b"\x00\x01\x01"), ("f32", "F32", [2, 3], f32),
        ("f64", "F64", [2], struct.pack("<2d", 1.5, -2)), ("i32", "I32", [2, 1], struct.pack("<2i", 7, -9)),
        ("i64", "I64", [2], struct.pack("<2q", 3, -4)), ("scalar", "F32", [], struct.pack("<f", 4)),
        ("empty", "F32", [0, 4], b"")], {"format": "headroom-checkpoint v1", "train.step": "12"})
    yield "no-metadata", safetensors([("w", "F32", [1, 1, 2], struct.pack("<2f", 1, 2))])
    yield "empty", safetensors([])
    small = [os.path.join(FIXTURES, name + ".safetensors") for name in ("adamw", "nn")]  # PyTorch-written
    small += [path for path in checkpoints if os.path.getsize(path) <= MAX_CHECKPOINT_SEED]
    for path in small:
        with open(path, "rb") as f:
            data = f.read()
        yield named_by_content(path, data), data


def json_seeds():
    yield "header", b'{"__metadata__":{"k":"v"},"w":{"dtype":"F32","shape":[2,3],"data_offsets":[0,24]}}'
    yield "escapes", '{"s": "tab\\t quote\\" slash\\/ \\u00e4\\ud83d\\ude00 \\\\", "n": [-1, 0, 9223372036854775807]}'.encode()
    yield "nested", b' [ [], {}, [[1, [2]], {"a": {"b": []}}], "" ] '
    yield "utf8", '{"Gr\u00fc\u00dfe": "\u6f22\u5b57 \U0001f600"}'.encode()


# ---- images ----------------------------------------------------------------------
# The image target reads its first byte as the choice of channels (byte % 5) and
# of extension (byte / 5 % 3: .png, .jpg, .bmp); each seed is written with
# the extension of its format and a few channel choices.

def png_chunk(kind, data):
    return struct.pack(">I", len(data)) + kind + data + struct.pack(">I", zlib.crc32(kind + data))


def png(width, height, colour_type, bit_depth, rows, extra=b"", interlace=0):
    ihdr = struct.pack(">IIBBBBB", width, height, bit_depth, colour_type, 0, 0, interlace)
    raw = b"".join(b"\x00" + row for row in rows)  # filter type 0 on every row
    return (b"\x89PNG\r\n\x1a\n" + png_chunk(b"IHDR", ihdr) + extra + png_chunk(b"IDAT", zlib.compress(raw)) +
            png_chunk(b"IEND", b""))


def png_seeds():
    yield "rgb", png(3, 2, 2, 8, [bytes(range(i, i + 9)) for i in (0, 100)])
    yield "grey-alpha", png(2, 2, 4, 8, [b"\x10\xff\x80\x7f", b"\xf0\x00\x40\x20"])
    yield "palette", png(4, 1, 3, 4, [b"\x01\x10"], extra=png_chunk(b"PLTE", b"\xff\x00\x00\x00\x00\xff"))
    yield "grey16", png(2, 1, 0, 16, [b"\x12\x34\xfe\xdc"])
    # Adam7 interlacing: for a 2 x 2 RGBA image, passes 1, 6 and 7 hold pixels.
    # Adam7: of a 2 x 2 image, passes 1 and 6 hold one pixel each, pass 7 the second row.
    yield "interlaced", png(2, 2, 6, 8, [b"\x01\x02\x03\xff", b"\x04\x05\x06\x80",
                                         b"\x07\x08\x09\x10\x0a\x0b\x0c\x00"], interlace=1)


def bmp(width, height, bits, pixel_rows, palette=b""):
    row_bytes = (width * bits + 31) // 32 * 4
    data = b"".join(row.ljust(row_bytes, b"\x00") for row in reversed(pixel_rows))  # bottom-up
    offset = 14 + 40 + len(palette)
    info = struct.pack("<IiiHHIIiiII", 40, width, height, 1, bits, 0, len(data), 2835, 2835, len(palette) // 4, 0)
    return b"BM" + struct.pack("<IHHI", offset + len(data), 0, 0, offset) + info + palette + data


def bmp_seeds():
    yield "bgr24", bmp(2, 2, 24, [b"\x00\x00\xff\x00\xff\x00", b"\xff\x00\x00\xff\xff\xff"])
    yield "palette8", bmp(3, 1, 8, [b"\x00\x01\x00"], palette=b"\x00\x00\x00\x00\xff\xff\xff\x00")
    yield "bgra32", bmp(1, 2, 32, [b"\x10\x20\x30\x40", b"\x50\x60\x70\x80"])


def jpeg(width, height, components):
    """A baseline JPEG whose every block is flat mid-grey: with one-symbol
    Huffman tables (DC category 0, AC end-of-block), each block codes as two
    0 bits.  components: 1 (grey) or 3 (YCbCr with 2 x 2 subsampled chroma)."""
    def segment(marker, data):
        return b"\xff" + bytes([marker]) + struct.pack(">H", len(data) + 2) + data
    sampling = [0x11] if components == 1 else [0x22, 0x11, 0x11]
    dqt = segment(0xDB, b"\x00" + bytes([1] * 64))
    sof = segment(0xC0, struct.pack(">BHHB", 8, height, width, components) +
                  b"".join(bytes([i + 1, sampling[i], 0]) for i in range(components)))
    one_symbol = bytes([1] + [0] * 15) + b"\x00"  # one code of length 1, for symbol 0
    dht = segment(0xC4, b"\x00" + one_symbol + b"\x10" + one_symbol)
    sos = segment(0xDA, bytes([components]) + b"".join(bytes([i + 1, 0x00]) for i in range(components)) +
                  b"\x00\x3f\x00")
    mcu_w, mcu_h = (8, 8) if components == 1 else (16, 16)
    blocks_per_mcu = 1 if components == 1 else 6
    mcus = -(-width // mcu_w) * -(-height // mcu_h)
    bits = "00" * blocks_per_mcu * mcus
    bits += "1" * (-len(bits) % 8)  # pad with 1 bits
    scan = bytes(int(bits[i:i + 8], 2) for i in range(0, len(bits), 8)).replace(b"\xff", b"\xff\x00")
    return b"\xff\xd8" + dqt + sof + dht + sos + scan + b"\xff\xd9"


def jpeg_seeds():
    yield "grey8x8", jpeg(8, 8, 1)
    yield "ycbcr420", jpeg(16, 16, 3)
    yield "grey-odd", jpeg(9, 3, 1)


def other_image_seeds():
    """Formats stb reads that we do not ask for (a loader must refuse or bound them)."""
    yield "gif", (b"GIF89a\x01\x00\x01\x00\x80\x00\x00\x00\x00\x00\xff\xff\xff!\xf9\x04\x01\x00\x00\x00\x00"
                  b",\x00\x00\x00\x00\x01\x00\x01\x00\x00\x02\x02D\x01\x00;")
    yield "pgm", b"P5\n2 1\n255\n\x00\xff"


def image_seeds():
    by_extension = {0: png_seeds, 1: jpeg_seeds, 2: bmp_seeds}
    for extension, seeds in by_extension.items():
        for name, data in seeds():
            for channels in (0, 3):
                yield f"{name}-c{channels}", bytes([extension * 5 + channels]) + data
    for name, data in other_image_seeds():
        yield name, bytes([0]) + data


# ---- the examples' data files -----------------------------------------------------

def idx(shape, data):
    return b"\x00\x00\x08" + bytes([len(shape)]) + b"".join(struct.pack(">I", n) for n in shape) + data


def idx_seeds():
    yield "images", idx([2, 3, 3], bytes(range(18)))
    yield "labels", idx([4], b"\x00\x09\x03\x01")
    yield "rgb", idx([1, 2, 2, 3], bytes(range(12)))


def mo(pairs, big_endian=False):
    """A GNU .mo catalog: header, the original and translated string tables, then the strings."""
    order = ">" if big_endian else "<"
    pairs = sorted(pairs)
    n, table = len(pairs), 28
    strings, originals, translations = b"", [], []
    start = table + 16 * n
    for text, column in [(p[0], originals) for p in pairs] + [(p[1], translations) for p in pairs]:
        data = text.encode()
        column.append((len(data), start + len(strings)))
        strings += data + b"\x00"
    header = struct.pack(order + "7I", 0x950412DE, 0, n, table, table + 8 * n, 0, 0)
    tables = b"".join(struct.pack(order + "2I", *entry) for entry in originals + translations)
    return header + tables + strings


def mo_seeds():
    catalog_header = ("", "Content-Type: text/plain; charset=UTF-8\n")
    yield "little", mo([catalog_header, ("Open file", "Datei \u00f6ffnen"), ("Quit", "Beenden")])
    yield "big", mo([catalog_header, ("yes", "ja")], big_endian=True)
    yield "plural-context", mo([catalog_header, ("menu\x04File", "Datei"), ("%d file\x00%d files", "%d Datei\x00%d Dateien")])


def tsv_seeds():
    yield "pairs", "Open file\tDatei \u00f6ffnen\nQuit\tBeenden\n".encode()
    yield "crlf-blank", b"yes\tja\r\n\r\n\nno\tnein"
    yield "utf8", "Stra\u00dfe\t\u00e9\u00e8 \U0001f600\n".encode()


def text_seeds():
    yield "ascii", b"Hello, world.\nA second line.\n"
    yield "multibyte", "Gr\u00fc\u00dfe \u2014 \u6f22\u5b57 \U0001f600 \u0410\u0411\n\u00a9\n".encode()
    yield "edges", "\u007f\u0080\u07ff\u0800\ud7ff\ue000\uffff\U00010000\U0010ffff".encode()


# ---- checkpoint metadata -------------------------------------------------------------
# The metadata target reads NUL-separated "key=value" records.

def read_metadata(path):
    with open(path, "rb") as f:
        (length,) = struct.unpack("<Q", f.read(8))
        return json.loads(f.read(length)).get("__metadata__", {})


def metadata_seeds(checkpoints):
    for path in sorted(glob.glob(os.path.join(FIXTURES, "*.safetensors"))) + checkpoints:
        metadata = read_metadata(path)
        if metadata:
            data = b"\x00".join(f"{k}={v}".encode() for k, v in sorted(metadata.items()))
            yield named_by_content(path, data), data
    yield "tokenizer", b"tokenizer=headroom-bpe v1 2\n104 101\n259 108\n"


def write_corpus(target, seeds):
    folder = os.path.join(HERE, "corpus", target)
    shutil.rmtree(folder, ignore_errors=True)
    os.makedirs(folder)
    total = 0
    for name, data in seeds:
        with open(os.path.join(folder, name), "wb") as f:
            f.write(data)
        total += len(data)
    print(f"{folder}: {len(os.listdir(folder))} seeds, {total} bytes")


def main():
    checkpoints = sys.argv[1:]
    write_corpus("safetensors", safetensors_seeds(checkpoints))
    write_corpus("json", json_seeds())
    write_corpus("image", image_seeds())
    write_corpus("idx", idx_seeds())
    write_corpus("mo", mo_seeds())
    write_corpus("tsv", tsv_seeds())
    write_corpus("text", text_seeds())
    write_corpus("metadata", metadata_seeds(checkpoints))


if __name__ == "__main__":
    main()
