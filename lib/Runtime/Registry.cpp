//===- Registry.cpp - backends and communicators by name ------------------===//

#include "merak/Runtime/Registry.h"

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"

#include <set>

namespace merak::runtime {

namespace {

std::map<std::string, BackendEntry> &backends() {
  static std::map<std::string, BackendEntry> entries;
  return entries;
}

std::map<std::string, CommunicatorEntry> &communicators() {
  static std::map<std::string, CommunicatorEntry> entries;
  return entries;
}

template <typename Entry>
std::vector<std::string> namesOf(const std::map<std::string, Entry> &map) {
  std::vector<std::string> names;
  for (const auto &[name, entry] : map)
    names.push_back(name);
  return names;
}

std::string listOrNone(const std::vector<std::string> &names) {
  return names.empty() ? std::string("none") : absl::StrJoin(names, ", ");
}

} // namespace

void registerBackend(BackendEntry entry) {
  std::string name = entry.name;
  backends()[name] = std::move(entry);
}

void registerCommunicator(CommunicatorEntry entry) {
  std::string name = entry.name;
  communicators()[name] = std::move(entry);
}

std::vector<std::string> backendNames() { return namesOf(backends()); }
std::vector<std::string> communicatorNames() {
  return namesOf(communicators());
}

absl::StatusOr<const BackendEntry *> findBackend(const std::string &name) {
  if (name == "auto") {
    auto cuda = backends().find("cuda");
    std::string why = "this build has no CUDA backend";
    if (cuda != backends().end() &&
        (!cuda->second.available || cuda->second.available(&why)))
      return &cuda->second;
    if (backends().count("cpu"))
      return findBackend("cpu");
    return absl::NotFoundError(
        absl::StrCat("--device=auto: no GPU backend can run here (", why,
                     ") and this build has no 'cpu' backend; it has: ",
                     listOrNone(backendNames())));
  }
  auto it = backends().find(name);
  if (it == backends().end())
    return absl::NotFoundError(
        absl::StrCat("no backend '", name,
                     "' in this build; it has: ", listOrNone(backendNames())));
  return &it->second;
}

absl::StatusOr<const CommunicatorEntry *>
findCommunicator(const std::string &name) {
  auto it = communicators().find(name);
  if (it == communicators().end())
    return absl::NotFoundError(absl::StrCat(
        "no communicator '", name,
        "' in this build; it has: ", listOrNone(communicatorNames())));
  return &it->second;
}

absl::Status checkBackendSupports(const Program &program,
                                  const Backend &backend) {
  // Each missing op once, with the first place it appears.
  std::map<OpKind, std::string> missing;
  for (const Instruction &inst : program.instructions)
    if (inst.kind == OpKind::Fused) { // the members, where it has no kernel
      if (!backend.supports(OpKind::Fused))
        for (const Instruction &m :
             program.fusedKernels[inst.attrs.index].members)
          if (!backend.supports(m.kind))
            missing.try_emplace(m.kind, m.location);
    } else if (!isCollective(inst.kind) && inst.kind != OpKind::Wait &&
               !backend.supports(inst.kind)) {
      missing.try_emplace(inst.kind, inst.location);
    }
  if (missing.empty())
    return absl::OkStatus();
  std::vector<std::string> ops;
  for (const auto &[kind, location] : missing)
    ops.push_back(absl::StrCat(
        opFullName(kind), location.empty() ? "" : " (at " + location + ")"));
  return absl::UnimplementedError(absl::StrCat(
      "the '", backend.name(), "' backend has no kernel for ",
      absl::StrJoin(ops, ", "), ", which @", program.function, " uses"));
}

} // namespace merak::runtime
