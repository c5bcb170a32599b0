// Packed machines (.smolmachine): one file holding a versioned manifest and a
// read-only filesystem image of a root tree (docs/machines.md, "Format"):
// erofs (format 2, what `pack create` writes) or squashfs (format 1, still
// read and, with image_type "squashfs", still written).
//
//   offset 0      header, 64 bytes, little-endian:
//                   char     magic[8] = "SMOLPACK"
//                   uint32   header_version   (1)
//                   uint32   manifest_size    (bytes of JSON at offset 64)
//                   uint8    manifest_sha256[32]
//                   uint8    reserved[16]     (zero)
//   offset 64     manifest, UTF-8 JSON (PackManifest), at most kPackManifestMax bytes
//   image.offset  the image (4 KiB-aligned; 64 KiB in formats 1 and 2), image.size bytes;
//                 the file ends there
//
// Readers accept every header_version up to their own and every manifest
// whose format_version major they know; keys they do not know are ignored,
// so a later writer adds optional keys without breaking older readers.
//
// Host side. Reading and verifying need no privilege; nothing here mounts.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "base/status.h"

namespace smolvm::machine {

inline constexpr char kPackMagic[8] = {'S', 'M', 'O', 'L', 'P', 'A', 'C', 'K'};
inline constexpr uint32_t kPackHeaderVersion = 1;
// Manifest "format_version": 1 = squashfs image, 2 = erofs image too (a
// reader of format 1 could not mount it). Writers write the lowest version
// that describes the pack, so a squashfs pack stays readable by format-1 readers.
inline constexpr int kPackFormatVersion = 2;
inline constexpr uint64_t kPackHeaderSize = 64;
inline constexpr uint64_t kPackImageOffset = 65536;  // format 1 writers
inline constexpr uint64_t kPackManifestMax = kPackImageOffset - kPackHeaderSize;
inline constexpr uint64_t kPackAlign = 4096;

struct PackManifest {
  int format_version = kPackFormatVersion;
  std::string image_type = "erofs";  // "erofs" or "squashfs"
  uint64_t image_offset = kPackImageOffset;
  uint64_t image_size = 0;
  std::string image_sha256;          // lowercase hex
  std::vector<std::string> command;  // default program and arguments ([] = none)
  std::vector<std::string> env;      // KEY=VAL, applied before `-e`
  std::string workdir = "/workspace";
  std::string model;       // the model directory inside, "" = none
  std::string created_by;  // "smolvm <version>"
  int64_t created_at = 0;  // unix seconds
  // What the image provides of the host's system directories (usr, bin,
  // lib, ...): those it lacks come read-only from the host.
  std::vector<std::string> system_dirs;
};

std::string ManifestToJson(const PackManifest& m);
Result<PackManifest> ManifestFromJson(const std::string& json);

struct PackCreateOptions {
  std::string from;   // directory whose contents become the image root ("" = none)
  std::vector<std::string> exclude;  // names at from's top level to leave out
  std::string model;  // optional directory, placed at /<basename>
  std::string model_inside;  // or: the model's path inside, already in `from`
  std::vector<std::string> extra_sources;  // more entries at the root, each by basename
  std::vector<std::string> command, env;
  std::string workdir = "/workspace";
  std::string created_by;
  std::string out;  // FILE.smolmachine (replaced atomically)
  // "erofs": uncompressed erofs (mkfs.erofs), the default: its page cache
  // holds large folios, so warm reads of weights run at the host
  // filesystem's speed (squashfs: ~2.4x slower, order-0 pages; see
  // docs/machines.md). "squashfs": mksquashfs lz4, format 1.
  std::string image_type = "erofs";
  std::string mksquashfs = "mksquashfs";  // $SMOLVM_MKSQUASHFS overrides
  std::string mkfs_erofs = "mkfs.erofs";  // $SMOLVM_MKFS_EROFS overrides
};

// Builds the image (see image_type) into out at the image offset, hashes it
// and writes header + manifest. mksquashfs writes at the offset itself;
// mkfs.erofs (1.5 takes one directory and no offset) runs in a private mount
// namespace over a tmpfs staging root with each source bind-mounted at its
// name, and the image is then moved to the offset (FALLOC_FL_INSERT_RANGE,
// or a copy where the filesystem lacks it). Nothing is left at `out`, its
// temporaries or the staging directory on failure. A missing tool is
// kNotFound.
Result<PackManifest> CreatePack(const PackCreateOptions& o);

// Header and manifest only (no image hash): bad magic, a newer major format,
// a manifest that fails its digest, a misaligned image or a file shorter or
// longer than the manifest says are errors (kMalformed).
// `fd` (optional, -1) reads through an already-open descriptor of the file.
Result<PackManifest> ReadPack(const std::string& path, int fd = -1);

// ReadPack plus the image's SHA-256 over exactly [offset, offset+size).
// `fd` (optional, -1) reads through an already-open descriptor of the file,
// so what is verified is what is later handed to the loop device.
Result<PackManifest> VerifyPack(const std::string& path, int fd = -1);

// True when `path` names a regular file (a pack), false for a directory.
bool IsPackFile(const std::string& path);

// SHA-256 of `len` bytes of fd from `offset`, lowercase hex.
Result<std::string> Sha256Range(int fd, uint64_t offset, uint64_t len);

}  // namespace smolvm::machine
