//===- SentencePiece.h - a SentencePiece model behind a plain interface ---===//
//
// SentencePiece's header declares its own `absl::string_view`, which clashes
// with Abseil's; only SentencePiece.cpp includes it.
//
//===----------------------------------------------------------------------===//

#ifndef MERAK_TOOLS_SENTENCEPIECE_H
#define MERAK_TOOLS_SENTENCEPIECE_H

#include <memory>
#include <string>
#include <string_view>
#include <vector>

namespace merak::tokenize {

class SentencePieceModel {
public:
  /// The model serialized in `bytes`; an empty `error` on success.
  static std::unique_ptr<SentencePieceModel> load(std::string_view bytes,
                                                  std::string &error);
  virtual ~SentencePieceModel();
  virtual int vocabSize() const = 0;
  /// The end-of-sentence id, -1 when the model has none.
  virtual int eosId() const = 0;
  /// Appends the ids of `text` to `ids`; false (with `error`) on failure.
  virtual bool encode(std::string_view text, std::vector<int> &ids,
                      std::string &error) const = 0;
};

/// Trains a byte-pair-encoding SentencePiece model of at most `vocabSize`
/// pieces on `corpus` (one sentence per line) and writes it to `modelPath`
/// (which ends in `.model`; its `.vocab` is written beside it). False,
/// with `error`, on failure.
bool trainSentencePiece(const std::string &corpus, const std::string &modelPath,
                        int vocabSize, std::string &error);

} // namespace merak::tokenize

#endif // MERAK_TOOLS_SENTENCEPIECE_H
