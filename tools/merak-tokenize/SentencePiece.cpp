//===- SentencePiece.cpp - SentencePiece's processor, without Abseil ------===//

#include "SentencePiece.h"

#include <sentencepiece_processor.h>

namespace merak::tokenize {

SentencePieceModel::~SentencePieceModel() = default;

namespace {

class Processor final : public SentencePieceModel {
public:
  sentencepiece::SentencePieceProcessor spm;

  int vocabSize() const override { return spm.GetPieceSize(); }
  int eosId() const override { return spm.eos_id(); }
  bool encode(std::string_view text, std::vector<int> &ids,
              std::string &error) const override {
    std::vector<int> piece;
    auto status = spm.Encode({text.data(), text.size()}, &piece);
    if (!status.ok()) {
      error = status.ToString();
      return false;
    }
    ids.insert(ids.end(), piece.begin(), piece.end());
    return true;
  }
};

} // namespace

std::unique_ptr<SentencePieceModel>
SentencePieceModel::load(std::string_view bytes, std::string &error) {
  auto model = std::make_unique<Processor>();
  auto status =
      model->spm.LoadFromSerializedProto({bytes.data(), bytes.size()});
  if (!status.ok()) {
    error = status.ToString();
    return nullptr;
  }
  error.clear();
  return model;
}

} // namespace merak::tokenize
