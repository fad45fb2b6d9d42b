//===- ArchiveCheck.h - a zip archive's structure and checksums -*- C++ -*-===//
//
// TorchScript archives are zip files. LibTorch's reader trusts them: a
// damaged entry (a flipped bit in compressed code, an entry whose method
// or sizes were changed) reaches its unpickler and TorchScript parser,
// which can read uninitialized memory or allocate what a length field
// says. The importer checks the archive first: the end-of-central-
// directory record (zip64 too), every central-directory entry, the local
// header it points to (same name, same method), the entry's data inside
// the file, the CRC-32 of every entry's bytes (inflated for deflated
// entries, without holding them), and in every pickle (`*.pkl`,
// `*.debug_pkl`) each length an opcode states against the bytes that
// follow it (LibTorch's unpickler allocates and zero-fills what a length
// says before reading). What it refuses names the entry and its offset.
//
//===----------------------------------------------------------------------===//

#ifndef MERAK_CONVERSION_TORCHSCRIPTTOMERAK_ARCHIVECHECK_H
#define MERAK_CONVERSION_TORCHSCRIPTTOMERAK_ARCHIVECHECK_H

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

namespace merak {

struct ArchiveEntry {
  std::string name;
  uint16_t method = 0; // 0: stored, 8: deflated
  uint64_t compressedSize = 0, size = 0;
  uint64_t localHeaderOffset = 0, dataOffset = 0;
  /// Where its central-directory entry starts.
  uint64_t directoryOffset = 0;
  uint32_t crc = 0;
  /// What is wrong with a debug-information pickle (`*.debug_pkl`) whose
  /// stated lengths overrun it; such an entry is not an error (the
  /// importer reads no debug information then), any other pickle's is.
  std::string damage;
};

/// Checks `bytes` as a zip archive. Returns "" and fills `entries` when it
/// is whole; else an error such as "entry 'mlp/code/__torch__.py' (local
/// header at byte 1234): CRC-32 is 0x1f2e3d4c, the directory says
/// 0x903e12f1".
/// With `verifyCrc` false, the structure alone (a fuzzer's mutator uses
/// it to repair the checksums of what it mutated).
std::string checkZipArchive(std::string_view bytes,
                            std::vector<ArchiveEntry> *entries = nullptr,
                            bool verifyCrc = true);

} // namespace merak

#endif // MERAK_CONVERSION_TORCHSCRIPTTOMERAK_ARCHIVECHECK_H
