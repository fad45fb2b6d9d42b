//===- SentencePiece.cpp - SentencePiece's processor, without Abseil ------===//

#include "SentencePiece.h"

#include <sentencepiece_processor.h>
#include <sentencepiece_trainer.h>

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

bool trainSentencePiece(const std::string &corpus, const std::string &modelPath,
                        int vocabSize, std::string &error) {
  const std::string suffix = ".model";
  if (modelPath.size() <= suffix.size() ||
      modelPath.compare(modelPath.size() - suffix.size(), suffix.size(),
                        suffix) != 0) {
    error = "the model's name must end in .model";
    return false;
  }
  std::string prefix = modelPath.substr(0, modelPath.size() - suffix.size());
  // One thread and the corpus in its order: the same model every time. A
  // corpus too small for the vocabulary gets the largest it supports.
  auto status = sentencepiece::SentencePieceTrainer::Train(
      {{"input", corpus},
       {"model_prefix", prefix},
       {"vocab_size", std::to_string(vocabSize)},
       {"model_type", "bpe"},
       {"character_coverage", "1.0"},
       {"hard_vocab_limit", "false"},
       {"num_threads", "1"},
       {"minloglevel", "2"}});
  if (!status.ok()) {
    error = status.ToString();
    return false;
  }
  error.clear();
  return true;
}

} // namespace merak::tokenize
