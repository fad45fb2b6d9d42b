//===- HardwareProfile.cpp - profiles: lookups, JSON, Galvatron files -----===//

#include "merak/Hardware/HardwareProfile.h"

#include <nlohmann/json.hpp>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <filesystem>
#include <fstream>
#include <limits>
#include <regex>
#include <set>
#include <sstream>

using json = nlohmann::ordered_json;
using namespace merak;

double HardwareProfile::peak(const std::string &type) const {
  auto it = peakByType.find(type);
  return it != peakByType.end() ? it->second : peakFlops;
}

double HardwareProfile::gemmRate(const std::string &type, double flops) const {
  auto it = gemm.find(type);
  if (it == gemm.end() || it->second.empty())
    return peak(type);
  const std::vector<GemmPoint> &points = it->second;
  // Written so that a NaN or non-positive size takes the smallest entry.
  if (!(flops > points.front().flops))
    return points.front().rate;
  if (flops >= points.back().flops)
    return points.back().rate;
  for (size_t i = 1; i < points.size(); ++i) {
    const GemmPoint &lo = points[i - 1], &hi = points[i];
    if (flops > hi.flops)
      continue;
    if (flops == hi.flops) // a measured size: its rate, not a rounding of it
      return hi.rate;
    double t = (std::log(flops) - std::log(lo.flops)) /
               (std::log(hi.flops) - std::log(lo.flops));
    return std::exp(std::log(lo.rate) +
                    t * (std::log(hi.rate) - std::log(lo.rate)));
  }
  return points.back().rate;
}

const CollectivePoint *
HardwareProfile::nearestCollective(const std::string &op, int group,
                                   bool crossNode) const {
  // The measured entry of the same collective and span whose group size is
  // nearest (in ratio); any collective of that span when this one is not
  // listed.
  const CollectivePoint *best = nullptr;
  double bestDistance = std::numeric_limits<double>::infinity();
  for (int pass = 0; pass < 2 && !best; ++pass)
    for (const CollectivePoint &p : collectives) {
      if (p.interNode != crossNode || (pass == 0 && p.op != op) ||
          p.busBandwidth <= 0)
        continue;
      double distance = std::fabs(std::log(double(p.group) / double(group)));
      if (distance < bestDistance) {
        bestDistance = distance;
        best = &p;
      }
    }
  return best;
}

double HardwareProfile::collectiveTime(const std::string &op, int group,
                                       bool crossNode,
                                       double bytesPerRank) const {
  if (group <= 1)
    return 0;
  if (const CollectivePoint *best = nearestCollective(op, group, crossNode))
    return best->latency + bytesPerRank / best->busBandwidth;
  double bandwidth = collectiveBandwidth;
  if (crossNode && interNode.bandwidth > 0)
    bandwidth = std::min(bandwidth, interNode.bandwidth);
  return collectiveLatency + (bandwidth > 0 ? bytesPerRank / bandwidth : 0);
}

double HardwareProfile::collectiveStall(const std::string &op, int group,
                                        bool crossNode) const {
  if (group <= 1)
    return 0;
  const CollectivePoint *best = nearestCollective(op, group, crossNode);
  return best ? best->stall : 0;
}

double HardwareProfile::allReduceTime(CollectiveAlgorithm algorithm, int group,
                                      bool crossNode, double bytes) const {
  if (group <= 1)
    return 0;
  double bandwidth = collectiveBandwidth;
  double distance = std::numeric_limits<double>::infinity();
  for (const CollectivePoint &p : collectives)
    if (p.op == "allreduce" && p.interNode == crossNode && p.busBandwidth > 0 &&
        std::fabs(std::log(double(p.group) / double(group))) < distance) {
      distance = std::fabs(std::log(double(p.group) / double(group)));
      bandwidth = p.busBandwidth;
    }
  if (crossNode && interNode.bandwidth > 0 && distance == INFINITY)
    bandwidth = std::min(bandwidth, interNode.bandwidth);
  const LinkFigures &link = crossNode ? interNode : intraNode;
  double latency = link.bandwidth > 0 ? link.latency : linkLatency;
  return double(allReduceSteps(algorithm, group)) * latency +
         (bandwidth > 0 ? allReduceBytes(algorithm, group, bytes) / bandwidth
                        : 0);
}

double HardwareProfile::transferTime(double bytes, bool crossNode) const {
  if (bytes <= 0)
    return 0;
  const LinkFigures &link = crossNode ? interNode : intraNode;
  double bandwidth = link.bandwidth > 0 ? link.bandwidth : linkBandwidth;
  double latency = link.bandwidth > 0 ? link.latency : linkLatency;
  return latency + link.stall + (bandwidth > 0 ? bytes / bandwidth : 0);
}

namespace {

/// Reads the fields of one JSON object, refusing keys it does not know and
/// values of the wrong kind, with the path of the key in the message.
class Reader {
public:
  Reader(const json &object, std::string path, std::string &error)
      : object(object), path(std::move(path)), error(error) {
    if (!object.is_object() && error.empty())
      error = this->path + ": expected an object";
  }

  bool ok() const { return error.empty(); }

  void number(const char *key, double &out, bool positive = true) {
    const json *v = find(key);
    if (!v)
      return;
    if (!v->is_number() || !std::isfinite(v->get<double>()) ||
        v->get<double>() < 0 || (positive && v->get<double>() == 0))
      return fail(key, positive ? "expected a positive number"
                                : "expected a non-negative number");
    out = v->get<double>();
  }
  void integer(const char *key, int &out, int least = 1) {
    const json *v = find(key);
    if (!v)
      return;
    if (!v->is_number_integer() || v->get<int64_t>() < least ||
        v->get<int64_t>() > (1 << 24))
      return fail(key, least == 1 ? "expected a positive integer"
                                  : "expected an integer of at least " +
                                        std::to_string(least));
    out = int(v->get<int64_t>());
  }
  void string(const char *key, std::string &out) {
    const json *v = find(key);
    if (!v)
      return;
    if (!v->is_string())
      return fail(key, "expected a string");
    out = v->get<std::string>();
  }
  void boolean(const char *key, bool &out) {
    const json *v = find(key);
    if (!v)
      return;
    if (!v->is_boolean())
      return fail(key, "expected true or false");
    out = v->get<bool>();
  }
  const json *find(const char *key) {
    if (!ok() || !object.is_object())
      return nullptr;
    seen.insert(key);
    auto it = object.find(key);
    return it == object.end() ? nullptr : &*it;
  }
  std::string at(const std::string &key) const { return path + "." + key; }
  void fail(const std::string &key, const std::string &message) {
    if (error.empty())
      error = at(key) + ": " + message;
  }
  /// Call last: any key not read is an error.
  void finish() {
    if (!ok() || !object.is_object())
      return;
    for (auto it = object.begin(); it != object.end(); ++it)
      if (!seen.count(it.key())) {
        error = at(it.key()) + ": unknown key";
        return;
      }
  }

private:
  const json &object;
  std::string path;
  std::string &error;
  std::set<std::string> seen;
};

/// A number as a person reads it: `1.34218e+08`, `2048`.
std::string formatNumber(double value) {
  std::ostringstream s;
  s << value;
  return s.str();
}

const std::set<std::string> kCollectiveOps = {"allreduce", "allgather",
                                              "reducescatter", "alltoall"};
const std::set<std::string> kTypes = {"f32", "tf32", "bf16", "f16"};

void readLink(Reader &parent, const char *key, LinkFigures &link,
              std::string &error) {
  const json *v = parent.find(key);
  if (!v)
    return;
  Reader r(*v, parent.at(key), error);
  r.number("bandwidth", link.bandwidth);
  r.number("latency", link.latency, /*positive=*/false);
  r.number("stall", link.stall, /*positive=*/false);
  r.finish();
}

} // namespace

std::string merak::parseHardwareProfile(const std::string &text,
                                        const std::string &sourceName,
                                        HardwareProfile &profile) {
  json doc;
  try {
    doc = json::parse(text);
  } catch (const json::parse_error &e) {
    return sourceName + ": not JSON (byte " + std::to_string(e.byte) +
           "): " + e.what();
  }
  std::string error;
  HardwareProfile p;
  Reader r(doc, sourceName, error);
  r.string("name", p.name);
  r.string("source", p.source);
  if (r.ok() && p.source != "measured" && p.source != "documented" &&
      p.source != "galvatron")
    r.fail("source", "expected measured, documented or galvatron, got '" +
                         p.source + "'");
  r.string("device", p.device);
  r.integer("devices_per_node", p.devicesPerNode);
  r.number("peak_flops", p.peakFlops);
  r.number("memory_bandwidth", p.memoryBandwidth);
  r.number("memory_capacity", p.memoryCapacity);
  r.number("link_bandwidth", p.linkBandwidth);
  r.number("link_latency", p.linkLatency, false);
  r.number("kernel_overhead", p.opOverhead, false);
  r.number("collective_bandwidth", p.collectiveBandwidth);
  r.number("collective_latency", p.collectiveLatency, false);
  r.number("overlap_coefficient", p.overlapCoefficient);
  if (const json *v = r.find("peak_flops_by_type")) {
    Reader types(*v, r.at("peak_flops_by_type"), error);
    for (const std::string &type : kTypes) {
      double rate = 0;
      types.number(type.c_str(), rate);
      if (rate > 0)
        p.peakByType[type] = rate;
    }
    types.finish();
  }
  if (const json *v = r.find("gemm")) {
    Reader types(*v, r.at("gemm"), error);
    for (const std::string &type : kTypes) {
      const json *list = types.find(type.c_str());
      if (!list)
        continue;
      std::string where = types.at(type);
      if (!list->is_array()) {
        types.fail(type, "expected a list of {flops, rate}");
        break;
      }
      // Ascending sizes, as printHardwareProfile writes them: an entry out
      // of order is more likely a typo in a size than a table to sort.
      std::vector<GemmPoint> points;
      for (size_t i = 0; i < list->size() && error.empty(); ++i) {
        std::string at = where + "[" + std::to_string(i) + "]";
        Reader point((*list)[i], at, error);
        GemmPoint g;
        point.number("flops", g.flops);
        point.number("rate", g.rate);
        point.finish();
        if (error.empty() && (g.flops == 0 || g.rate == 0))
          error = at + ": needs both flops and rate";
        if (error.empty() && !points.empty() && g.flops == points.back().flops)
          error = at + ".flops: a second entry for " + formatNumber(g.flops) +
                  " FLOPs";
        if (error.empty() && !points.empty() && g.flops < points.back().flops)
          error = at + ".flops: " + formatNumber(g.flops) + " after " +
                  formatNumber(points.back().flops) +
                  ": entries must ascend in flops";
        points.push_back(g);
      }
      p.gemm[type] = std::move(points);
    }
    types.finish();
  }
  if (const json *v = r.find("p2p")) {
    Reader links(*v, r.at("p2p"), error);
    readLink(links, "intra_node", p.intraNode, error);
    readLink(links, "inter_node", p.interNode, error);
    links.finish();
  }
  if (const json *v = r.find("collectives")) {
    if (!v->is_array()) {
      r.fail("collectives", "expected a list");
    } else {
      for (size_t i = 0; i < v->size() && error.empty(); ++i) {
        std::string where = r.at("collectives") + "[" + std::to_string(i) + "]";
        Reader c((*v)[i], where, error);
        CollectivePoint point;
        c.string("op", point.op);
        c.integer("group", point.group, /*least=*/2);
        c.boolean("inter_node", point.interNode);
        c.number("bus_bandwidth", point.busBandwidth);
        c.number("latency", point.latency, false);
        c.number("stall", point.stall, false);
        c.finish();
        if (error.empty() && !kCollectiveOps.count(point.op))
          error = where +
                  ".op: expected allreduce, allgather, reducescatter "
                  "or alltoall, got '" +
                  point.op + "'";
        if (error.empty() && point.busBandwidth == 0)
          error = where + ": needs bus_bandwidth";
        p.collectives.push_back(point);
      }
    }
  }
  r.finish();
  if (!error.empty())
    return error;
  profile = std::move(p);
  return "";
}

std::string merak::printHardwareProfile(const HardwareProfile &p) {
  json doc;
  doc["name"] = p.name;
  doc["source"] = p.source;
  doc["device"] = p.device;
  doc["devices_per_node"] = p.devicesPerNode;
  doc["peak_flops"] = p.peakFlops;
  if (!p.peakByType.empty()) {
    json types = json::object();
    for (const auto &[type, rate] : p.peakByType)
      types[type] = rate;
    doc["peak_flops_by_type"] = types;
  }
  doc["memory_bandwidth"] = p.memoryBandwidth;
  doc["memory_capacity"] = p.memoryCapacity;
  doc["kernel_overhead"] = p.opOverhead;
  doc["link_bandwidth"] = p.linkBandwidth;
  doc["link_latency"] = p.linkLatency;
  doc["collective_bandwidth"] = p.collectiveBandwidth;
  doc["collective_latency"] = p.collectiveLatency;
  doc["overlap_coefficient"] = p.overlapCoefficient;
  if (!p.gemm.empty()) {
    json gemm = json::object();
    for (const auto &[type, points] : p.gemm) {
      json list = json::array();
      for (const GemmPoint &g : points)
        list.push_back({{"flops", g.flops}, {"rate", g.rate}});
      gemm[type] = list;
    }
    doc["gemm"] = gemm;
  }
  json links = json::object();
  if (p.intraNode.bandwidth > 0)
    links["intra_node"] = {{"bandwidth", p.intraNode.bandwidth},
                           {"latency", p.intraNode.latency},
                           {"stall", p.intraNode.stall}};
  if (p.interNode.bandwidth > 0)
    links["inter_node"] = {{"bandwidth", p.interNode.bandwidth},
                           {"latency", p.interNode.latency},
                           {"stall", p.interNode.stall}};
  if (!links.empty())
    doc["p2p"] = links;
  if (!p.collectives.empty()) {
    json list = json::array();
    for (const CollectivePoint &c : p.collectives)
      list.push_back({{"op", c.op},
                      {"group", c.group},
                      {"inter_node", c.interNode},
                      {"bus_bandwidth", c.busBandwidth},
                      {"latency", c.latency},
                      {"stall", c.stall}});
    doc["collectives"] = list;
  }
  // A name or device that is not UTF-8 (a --profile-name in another
  // encoding) is written with replacement characters, not refused.
  return doc.dump(2, ' ', false, json::error_handler_t::replace) + "\n";
}

namespace {

std::string readFile(const std::filesystem::path &path, std::string &text) {
  std::ifstream in(path, std::ios::binary);
  if (!in)
    return path.string() + ": cannot open";
  std::ostringstream s;
  s << in.rdbuf();
  text = s.str();
  return "";
}

/// `text`, decimal digits, as an int; -1 when empty or of more than seven
/// digits.
int parseCount(const std::string &text) {
  if (text.empty() || text.size() > 7)
    return -1;
  return std::stoi(text);
}

/// A Galvatron hardware-profile directory: bandwidths in GB/s (bus
/// bandwidth of NCCL's tests), keyed `allreduce_size_<n>_consec_<0|1>` and
/// `pp_size_<n>`; `overlap_coe`.
std::string loadGalvatron(const std::filesystem::path &dir,
                          HardwareProfile &profile) {
  namespace fs = std::filesystem;
  HardwareProfile p;
  // `dir/` names the directory too.
  fs::path named = dir.filename().empty() ? dir.parent_path() : dir;
  p.name = "galvatron:" + named.filename().string();
  p.source = "galvatron";
  const std::regex allreduceFile(
      R"(allreduce_bandwidth_(\d+)nodes_(\d+)gpus_per_node\.json)");
  const std::regex p2pFile(
      R"(p2p_bandwidth_(\d+)nodes_(\d+)gpus_per_node\.json)");
  const std::regex allreduceKey(R"(allreduce_size_(\d+)_consec_([01]))");
  const std::regex p2pKey(R"(pp_size_(\d+))");
  bool found = false;
  std::vector<fs::path> files;
  std::error_code ec;
  for (fs::directory_iterator it(dir, ec), end; !ec && it != end;
       it.increment(ec))
    files.push_back(it->path());
  if (ec)
    return dir.string() + ": cannot list the directory: " + ec.message();
  std::sort(files.begin(), files.end());
  for (const fs::path &file : files) {
    std::string base = file.filename().string();
    std::smatch m;
    bool isAllreduce = std::regex_match(base, m, allreduceFile);
    bool isP2p = !isAllreduce && std::regex_match(base, m, p2pFile);
    bool isOverlap = base == "overlap_coefficient.json";
    if (!isAllreduce && !isP2p && !isOverlap)
      continue;
    found = true;
    std::string text;
    if (std::string e = readFile(file, text); !e.empty())
      return e;
    json doc;
    try {
      doc = json::parse(text);
    } catch (const json::parse_error &e) {
      return file.string() + ": not JSON (byte " + std::to_string(e.byte) + ")";
    }
    if (!doc.is_object())
      return file.string() + ": expected an object";
    int nodes = 1, perNode = p.devicesPerNode;
    if (!isOverlap) {
      nodes = parseCount(m[1].str());
      perNode = parseCount(m[2].str());
      if (nodes < 1 || perNode < 1)
        return file.string() +
               ": node and GPU counts in the name must be positive integers "
               "below 10^7";
      p.devicesPerNode = perNode;
    }
    for (auto it = doc.begin(); it != doc.end(); ++it) {
      const std::string &key = it.key();
      if (!it->is_number() || it->get<double>() <= 0)
        return file.string() + ": " + key + ": expected a positive number";
      double value = it->get<double>();
      std::smatch k;
      if (isOverlap) {
        if (key != "overlap_coe")
          return file.string() + ": " + key + ": unknown key";
        p.overlapCoefficient = value;
      } else if (isAllreduce && std::regex_match(key, k, allreduceKey)) {
        CollectivePoint c;
        c.op = "allreduce";
        c.group = parseCount(k[1].str());
        if (c.group < 2)
          return file.string() + ": " + key +
                 ": expected a group of 2 to 10^7 ranks";
        // Consecutive groups larger than a node, and strided groups on
        // several nodes, cross nodes.
        c.interNode = c.group > perNode || (k[2].str() == "0" && nodes > 1);
        c.busBandwidth = value * 1e9;
        c.latency = p.collectiveLatency;
        p.collectives.push_back(c);
      } else if (isP2p && std::regex_match(key, k, p2pKey)) {
        int pp = parseCount(k[1].str());
        if (pp < 2)
          return file.string() + ": " + key +
                 ": expected a pipeline of 2 to 10^7 stages";
        // Galvatron measures pipelines of pp ranks over all devices:
        // neighbours share a node while a stage fits in one.
        int64_t total = int64_t(nodes) * perNode;
        bool cross = nodes > 1 && total / pp >= perNode;
        LinkFigures &link = cross ? p.interNode : p.intraNode;
        // The slowest pipeline measured bounds a transfer.
        if (link.bandwidth == 0 || value * 1e9 < link.bandwidth)
          link = {value * 1e9, p.linkLatency};
      } else {
        return file.string() + ": " + key + ": unknown key";
      }
    }
  }
  if (!found)
    return dir.string() + ": a directory without Galvatron hardware files "
                          "(allreduce_bandwidth_*nodes_*gpus_per_node.json, "
                          "p2p_bandwidth_*.json, overlap_coefficient.json)";
  profile = std::move(p);
  return "";
}

} // namespace

std::string merak::loadHardwareProfile(const std::string &path,
                                       HardwareProfile &profile) {
  std::error_code ec;
  if (std::filesystem::is_directory(path, ec))
    return loadGalvatron(path, profile);
  std::string text;
  if (std::string e = readFile(path, text); !e.empty())
    return e;
  return parseHardwareProfile(text, path, profile);
}
