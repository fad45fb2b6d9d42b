//===- HtmlReport.cpp - plans and runs as self-contained HTML -------------===//

#include "HtmlReport.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <map>
#include <optional>
#include <set>
#include <sstream>
#include <vector>

namespace merak::driver {

namespace {

using json = nlohmann::json;

std::string esc(const std::string &s) {
  std::string out;
  for (char c : s) {
    switch (c) {
    case '<':
      out += "&lt;";
      break;
    case '>':
      out += "&gt;";
      break;
    case '&':
      out += "&amp;";
      break;
    case '"':
      out += "&quot;";
      break;
    default:
      out += c;
    }
  }
  return out;
}

std::string num(double v, int digits = 4) {
  char buf[64];
  std::snprintf(buf, sizeof(buf), "%.*g", digits, v);
  return buf;
}

std::string fixed(double v, int decimals) {
  char buf[64];
  std::snprintf(buf, sizeof(buf), "%.*f", decimals, v);
  return buf;
}

std::string megabytes(double bytes) {
  return fixed(bytes / 1e6, bytes < 1e6 ? 3 : 1) + " MB";
}

const char *kPalette[] = {"#4e79a7", "#f28e2b", "#59a14f", "#e15759",
                          "#76b7b2", "#edc948", "#b07aa1", "#ff9da7",
                          "#9c755f", "#bab0ac"};

std::string colourOf(const std::string &kind) {
  static const std::map<std::string, std::string> fixedColours = {
      {"F", "#4e79a7"},
      {"FK", "#76b7b2"},
      {"R", "#edc948"},
      {"B", "#f28e2b"},
      {"W", "#59a14f"},
      {"forward", "#4e79a7"},
      {"backward", "#f28e2b"},
      {"backward_input", "#f28e2b"},
      {"backward_weight", "#59a14f"},
      {"weight", "#59a14f"},
      {"recompute", "#edc948"},
      {"optimizer", "#b07aa1"},
      {"send", "#9c755f"},
      {"recv", "#bab0ac"},
      {"collective", "#e15759"}};
  auto it = fixedColours.find(kind);
  if (it != fixedColours.end())
    return it->second;
  size_t h = 0;
  for (char c : kind)
    h = h * 31 + static_cast<unsigned char>(c);
  return kPalette[h % 10];
}

/// The palette's colour for a row numbered `i` (which may be negative).
const char *paletteAt(int64_t i) { return kPalette[((i % 10) + 10) % 10]; }

const char *kStyle = R"(<style>
body{font-family:sans-serif;margin:24px;color:#222;max-width:960px}
h1{font-size:22px}h2{font-size:17px;margin-top:28px;border-bottom:1px solid #ddd}
table{border-collapse:collapse;font-size:13px}td,th{border:1px solid #ddd;padding:3px 8px;text-align:left}
th{background:#f4f4f4}.num{text-align:right}.note{color:#666;font-size:13px}
svg text{font-family:sans-serif}.bar{display:inline-block;height:10px;background:#4e79a7}
</style>)";

std::string page(const std::string &title, const std::string &body) {
  return "<!DOCTYPE html>\n<html><head><meta charset=\"utf-8\"><title>" +
         esc(title) + "</title>" + kStyle + "</head><body>\n<h1>" + esc(title) +
         "</h1>\n" + body + "</body></html>\n";
}

/// Rows of a key/value table.
std::string
summaryTable(const std::vector<std::pair<std::string, std::string>> &rows) {
  std::string out = "<table>";
  for (const auto &[k, v] : rows)
    out += "<tr><th>" + esc(k) + "</th><td>" + esc(v) + "</td></tr>";
  return out + "</table>\n";
}

/// About five round ticks covering [lo, hi].
std::vector<double> ticks(double lo, double hi) {
  if (!(hi > lo))
    hi = lo + 1;
  double span = hi - lo, step = std::pow(10, std::floor(std::log10(span / 5)));
  for (double m : {1.0, 2.0, 5.0, 10.0})
    if (span / (step * m) <= 6) {
      step *= m;
      break;
    }
  std::vector<double> out;
  if (!std::isfinite(step) || !(step > 0))
    return out;
  // By index, and at most a dozen: near 1e17 adding `step` may not move t.
  double first = std::ceil(lo / step);
  for (int i = 0; i < 12; ++i) {
    double t = (first + i) * step;
    if (!(t <= hi + step * 1e-9) || (!out.empty() && t == out.back()))
      break;
    out.push_back(std::abs(t) < step * 1e-9 ? 0 : t);
  }
  return out;
}

struct Series {
  std::string name, colour;
  std::vector<std::pair<double, double>> points;
  bool dots = false;
};

/// A line chart of `series` against the step.
std::string lineChart(const std::vector<Series> &series,
                      const std::string &yLabel) {
  const double W = 900, H = 260, L = 70, R = 20, T = 20, B = 40;
  double x0 = 1e300, x1 = -1e300, y0 = 1e300, y1 = -1e300;
  for (const Series &s : series)
    for (auto [x, y] : s.points) {
      x0 = std::min(x0, x);
      x1 = std::max(x1, x);
      y0 = std::min(y0, y);
      y1 = std::max(y1, y);
    }
  if (x0 > x1)
    return "<p class=\"note\">No values to draw.</p>\n";
  if (x1 == x0)
    x1 = x0 + 1;
  if (y1 == y0) {
    y0 -= 0.5;
    y1 += 0.5;
  }
  double pad = (y1 - y0) * 0.05;
  y0 -= pad;
  y1 += pad;
  auto px = [&](double x) { return L + (x - x0) / (x1 - x0) * (W - L - R); };
  auto py = [&](double y) { return T + (y1 - y) / (y1 - y0) * (H - T - B); };
  std::string svg = "<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"" +
                    num(W) + "\" height=\"" + num(H) + "\">";
  svg += "<rect x=\"" + num(L) + "\" y=\"" + num(T) + "\" width=\"" +
         num(W - L - R) + "\" height=\"" + num(H - T - B) +
         "\" fill=\"#fafafa\" stroke=\"#ccc\"/>";
  for (double t : ticks(y0, y1)) {
    svg += "<line x1=\"" + num(L) + "\" x2=\"" + num(W - R) + "\" y1=\"" +
           num(py(t), 6) + "\" y2=\"" + num(py(t), 6) +
           "\" stroke=\"#e6e6e6\"/><text x=\"" + num(L - 6) + "\" y=\"" +
           num(py(t) + 4, 6) + "\" font-size=\"11\" text-anchor=\"end\">" +
           num(t, 6) + "</text>";
  }
  for (double t : ticks(x0, x1))
    svg += "<text x=\"" + num(px(t), 6) + "\" y=\"" + num(H - B + 16) +
           "\" font-size=\"11\" text-anchor=\"middle\">" + num(t, 6) +
           "</text>";
  svg += "<text x=\"" + num((L + W - R) / 2) + "\" y=\"" + num(H - 6) +
         "\" font-size=\"12\" text-anchor=\"middle\">step</text>";
  svg += "<text x=\"14\" y=\"" + num(T + (H - T - B) / 2) +
         "\" font-size=\"12\" text-anchor=\"middle\" transform=\"rotate(-90 "
         "14 " +
         num(T + (H - T - B) / 2) + ")\">" + esc(yLabel) + "</text>";
  double legendX = L + 10;
  for (const Series &s : series) {
    std::string pts;
    for (auto [x, y] : s.points)
      pts += num(px(x), 7) + "," + num(py(y), 7) + " ";
    svg += "<polyline fill=\"none\" stroke=\"" + s.colour +
           "\" stroke-width=\"1.5\" points=\"" + pts + "\"/>";
    if (s.dots)
      for (auto [x, y] : s.points)
        svg += "<circle cx=\"" + num(px(x), 7) + "\" cy=\"" + num(py(y), 7) +
               "\" r=\"3\" fill=\"" + s.colour + "\"><title>step " + num(x, 9) +
               ": " + num(y, 6) + "</title></circle>";
    svg += "<rect x=\"" + num(legendX) + "\" y=\"" + num(T + 6) +
           "\" width=\"12\" height=\"4\" fill=\"" + s.colour +
           "\"/><text x=\"" + num(legendX + 16) + "\" y=\"" + num(T + 11) +
           "\" font-size=\"11\">" + esc(s.name) + "</text>";
    legendX += 30 + 7 * double(s.name.size());
  }
  return svg + "</svg>\n";
}

/// A Gantt chart: one row per name, boxes [start, end) with a colour key
/// and a label; `unit` names the time axis.
struct Box {
  double start, end;
  std::string kind, label, title;
  bool thin = false;
};
std::string gantt(const std::vector<std::string> &rows,
                  const std::vector<std::vector<Box>> &boxes,
                  const std::string &unit) {
  // Room on the left for the longest row name.
  size_t longest = 0;
  for (const std::string &name : rows)
    longest = std::max(longest, name.size());
  const double W = 900, R = 20, T = 10, rowH = 30;
  const double L = std::min(320.0, std::max(120.0, 12 + 6.2 * double(longest)));
  double t0 = 1e300, t1 = -1e300;
  std::set<std::string> kinds;
  for (const auto &row : boxes)
    for (const Box &b : row) {
      t0 = std::min(t0, b.start);
      t1 = std::max(t1, b.end);
      kinds.insert(b.kind);
    }
  if (t0 > t1)
    return "<p class=\"note\">No tasks to draw.</p>\n";
  if (t1 == t0)
    t1 = t0 + 1;
  double H = T + rowH * double(rows.size()) + 50;
  auto px = [&](double t) { return L + (t - t0) / (t1 - t0) * (W - L - R); };
  std::string svg = "<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"" +
                    num(W) + "\" height=\"" + num(H) + "\">";
  for (size_t r = 0; r < rows.size(); ++r) {
    double y = T + rowH * double(r);
    svg += "<text x=\"" + num(L - 6) + "\" y=\"" + num(y + 17) +
           "\" font-size=\"11\" text-anchor=\"end\">" + esc(rows[r]) +
           "</text>";
    for (const Box &b : boxes[r]) {
      double x = px(b.start), w = std::max(0.5, px(b.end) - px(b.start));
      double by = b.thin ? y + 22 : y + 2, bh = b.thin ? 5 : 19;
      svg += "<rect x=\"" + num(x, 7) + "\" y=\"" + num(by) + "\" width=\"" +
             num(w, 7) + "\" height=\"" + num(bh) + "\" fill=\"" +
             colourOf(b.kind) + "\" stroke=\"#fff\" stroke-width=\"0.5\">" +
             "<title>" + esc(b.title) + "</title></rect>";
      if (!b.thin && w >= 14 && !b.label.empty())
        svg += "<text x=\"" + num(x + w / 2, 7) + "\" y=\"" + num(y + 16) +
               "\" font-size=\"10\" fill=\"#fff\" text-anchor=\"middle\">" +
               esc(b.label) + "</text>";
    }
  }
  double axisY = T + rowH * double(rows.size()) + 4;
  for (double t : ticks(t0, t1))
    svg += "<line x1=\"" + num(px(t), 7) + "\" x2=\"" + num(px(t), 7) +
           "\" y1=\"" + num(axisY) + "\" y2=\"" + num(axisY + 4) +
           "\" stroke=\"#888\"/><text x=\"" + num(px(t), 7) + "\" y=\"" +
           num(axisY + 16) + "\" font-size=\"11\" text-anchor=\"middle\">" +
           num(t, 6) + "</text>";
  svg += "<text x=\"" + num(W - R) + "\" y=\"" + num(axisY + 30) +
         "\" font-size=\"11\" text-anchor=\"end\">" + esc(unit) + "</text>";
  double kx = L;
  for (const std::string &k : kinds) {
    svg += "<rect x=\"" + num(kx) + "\" y=\"" + num(axisY + 22) +
           "\" width=\"10\" height=\"10\" fill=\"" + colourOf(k) +
           "\"/><text x=\"" + num(kx + 14) + "\" y=\"" + num(axisY + 31) +
           "\" font-size=\"11\">" + esc(k) + "</text>";
    kx += 30 + 7 * double(k.size());
  }
  return svg + "</svg>\n";
}

/// Reads `j[key]` as T, or fails naming `where.key` (`where` is empty or
/// ends in a dot).
template <typename T>
bool field(const json &j, const char *key, const std::string &where, T &out,
           std::string &error) {
  if (!j.is_object() && !where.empty()) {
    error =
        "field " + where.substr(0, where.size() - 1) + " has the wrong type";
    return false;
  }
  if (!j.is_object() || !j.contains(key)) {
    error = "missing field " + where + key;
    return false;
  }
  try {
    out = j.at(key).get<T>();
  } catch (const std::exception &) {
    error = "field " + where + key + " has the wrong type";
    return false;
  }
  return true;
}

/// Reads the list `plan[key]`, or fails naming it.
bool listField(const json &plan, const char *key, json &out,
               std::string &error) {
  if (!field(plan, key, "", out, error))
    return false;
  if (!out.is_array()) {
    error = std::string("field ") + key + " has the wrong type";
    return false;
  }
  return true;
}

/// `j[key]` when it is a string, else `fallback`; for the trace, whose
/// events are skipped rather than refused when they are odd.
std::string stringOr(const json &j, const char *key,
                     const std::string &fallback) {
  if (j.is_object())
    if (auto it = j.find(key); it != j.end() && it->is_string())
      return it->get<std::string>();
  return fallback;
}

/// `j[key]` when it is an integer, else `fallback`.
int64_t integerOr(const json &j, const char *key, int64_t fallback) {
  if (j.is_object())
    if (auto it = j.find(key); it != j.end() && it->is_number_integer())
      return it->get<int64_t>();
  return fallback;
}

/// `j[key]` when it is a finite number.
std::optional<double> finiteAt(const json &j, const char *key) {
  if (j.is_object())
    if (auto it = j.find(key); it != j.end() && it->is_number()) {
      double v = it->get<double>();
      if (std::isfinite(v))
        return v;
    }
  return std::nullopt;
}

const char *kMemoryParts[] = {"parameters", "gradients", "optimizer_state",
                              "activations", "buffers"};

/// One pipeline rank's estimated bytes, by kMemoryParts.
struct RankMemory {
  int64_t pipelineRank = 0;
  double bytes[5] = {0, 0, 0, 0, 0};
  double total() const {
    double sum = 0;
    for (double b : bytes)
      sum += std::max(0.0, b);
    return sum;
  }
};

bool renderPlan(const json &plan, std::string &html, std::string &error) {
  if (!plan.is_object() || stringOr(plan, "format", "") != "merak-plan-v1") {
    error = "not a merak-plan-v1 summary (field format)";
    return false;
  }
  std::string source;
  int64_t ranks = 0;
  json mesh, layout, layers, memory, collectives;
  if (!field(plan, "source", "", source, error) ||
      !field(plan, "ranks", "", ranks, error) ||
      !field(plan, "mesh", "", mesh, error) ||
      !listField(plan, "rank_layout", layout, error) ||
      !listField(plan, "layers", layers, error) ||
      !listField(plan, "memory", memory, error) ||
      !listField(plan, "collectives", collectives, error))
    return false;
  if (!mesh.is_object()) {
    error = "field mesh has the wrong type";
    return false;
  }
  std::vector<std::string> axes;
  std::vector<int64_t> shape;
  if (!field(mesh, "axes", "mesh.", axes, error) ||
      !field(mesh, "shape", "mesh.", shape, error))
    return false;
  const json &pipe = plan.contains("pipeline") ? plan["pipeline"] : json();
  std::string body;
  std::string meshText;
  for (size_t a = 0; a < shape.size(); ++a)
    meshText += (a ? " x " : "") + (a < axes.size() ? axes[a] : "?") + "=" +
                std::to_string(shape[a]);
  std::vector<std::pair<std::string, std::string>> rows = {
      {"plan", source},
      {"ranks", std::to_string(ranks)},
      {"mesh (one pipeline stage)",
       meshText.empty() ? "one device" : meshText}};
  std::string bubble;
  if (pipe.is_object()) {
    std::string schedule;
    int64_t pp = 0, virtualStages = 0, microbatches = 0;
    double fraction = 0;
    if (!field(pipe, "schedule", "pipeline.", schedule, error) ||
        !field(pipe, "pp", "pipeline.", pp, error) ||
        !field(pipe, "virtual", "pipeline.", virtualStages, error) ||
        !field(pipe, "microbatches", "pipeline.", microbatches, error) ||
        !field(pipe, "bubble", "pipeline.", fraction, error))
      return false;
    bubble = fixed(100 * fraction, 1) + " %";
    rows.push_back(
        {"pipeline", schedule + ", " + std::to_string(pp) + " stages x " +
                         std::to_string(virtualStages) + " virtual, " +
                         std::to_string(microbatches) +
                         " micro-batches, bubble " + bubble + " (unit time)"});
  } else if (!pipe.is_null()) {
    error = "field pipeline has the wrong type";
    return false;
  } else {
    rows.push_back({"pipeline", "none"});
  }
  std::vector<RankMemory> memoryOf;
  double fullest = 0;
  for (const json &m : memory) {
    RankMemory rm;
    if (!field(m, "pipeline_rank", "memory[].", rm.pipelineRank, error))
      return false;
    for (size_t k = 0; k < 5; ++k)
      if (m.contains(kMemoryParts[k]) &&
          !field(m, kMemoryParts[k], "memory[].", rm.bytes[k], error))
        return false; // an absent part (no activations) counts 0
    fullest = std::max(fullest, rm.total());
    memoryOf.push_back(rm);
  }
  rows.push_back({"fullest rank (estimate)", megabytes(fullest)});
  body += summaryTable(rows);

  // Which pipeline rank holds each stage (a rank holds several with virtual
  // stages); none without a pipeline.
  std::map<int64_t, int64_t> rankOfStage;
  std::map<int64_t, std::string> stagesOfRank;
  if (pipe.is_object() && pipe.contains("stages")) {
    if (!pipe["stages"].is_array()) {
      error = "field pipeline.stages has the wrong type";
      return false;
    }
    for (const json &s : pipe["stages"]) {
      int64_t stage = 0, pipelineRank = 0;
      if (!field(s, "stage", "pipeline.stages[].", stage, error) ||
          !field(s, "pipeline_rank", "pipeline.stages[].", pipelineRank, error))
        return false;
      rankOfStage[stage] = pipelineRank;
    }
    for (const auto &[stage, pipelineRank] : rankOfStage) {
      std::string &text = stagesOfRank[pipelineRank];
      text += (text.empty() ? "stage " : ", ") + std::to_string(stage);
    }
    for (auto &[pipelineRank, text] : stagesOfRank)
      if (text.find(',') != std::string::npos)
        text.insert(5, "s");
  }

  // The mesh: pipeline ranks down, mesh ranks across.
  body += "<h2>Ranks</h2>\n";
  {
    std::map<int64_t, std::vector<std::pair<int64_t, std::string>>> grid;
    for (const json &e : layout) {
      int64_t r = 0, p = 0;
      std::vector<int64_t> coords;
      if (!field(e, "rank", "rank_layout[].", r, error) ||
          !field(e, "pipeline_rank", "rank_layout[].", p, error) ||
          !field(e, "coords", "rank_layout[].", coords, error))
        return false;
      std::string label;
      for (size_t a = 0; a < coords.size(); ++a)
        label += (a ? " " : "") + (a < axes.size() ? axes[a] : "?") +
                 std::to_string(coords[a]);
      grid[p].push_back({r, label});
    }
    size_t columns = 1;
    for (auto &[p, cells] : grid)
      columns = std::max(columns, cells.size());
    double cw = std::min(110.0, 740.0 / double(columns)), ch = 40;
    double W = 150 + cw * double(columns) + 10,
           H = ch * double(grid.size()) + 10;
    std::string svg = "<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"" +
                      num(W) + "\" height=\"" + num(H) + "\">";
    size_t row = 0;
    for (auto &[p, cells] : grid) {
      double y = 5 + ch * double(row++);
      svg += "<text x=\"144\" y=\"" + num(y + 15) +
             "\" font-size=\"12\" text-anchor=\"end\">pipeline rank " +
             std::to_string(p) + "</text>";
      if (auto it = stagesOfRank.find(p); it != stagesOfRank.end())
        svg += "<text x=\"144\" y=\"" + num(y + 29) +
               "\" font-size=\"10\" fill=\"#555\" text-anchor=\"end\">" +
               it->second + "</text>";
      for (size_t c = 0; c < cells.size(); ++c) {
        double x = 150 + cw * double(c);
        svg += "<rect x=\"" + num(x) + "\" y=\"" + num(y) + "\" width=\"" +
               num(cw - 4) + "\" height=\"" + num(ch - 4) + "\" fill=\"" +
               paletteAt(p) +
               "\" fill-opacity=\"0.25\" stroke=\"#888\"/><text x=\"" +
               num(x + (cw - 4) / 2) + "\" y=\"" + num(y + 15) +
               "\" font-size=\"11\" text-anchor=\"middle\">rank " +
               std::to_string(cells[c].first) + "</text><text x=\"" +
               num(x + (cw - 4) / 2) + "\" y=\"" + num(y + 29) +
               "\" font-size=\"10\" text-anchor=\"middle\">" +
               esc(cells[c].second) + "</text>";
      }
    }
    body += svg + "</svg>\n";
  }

  // Stages and layers.
  body += "<h2>Layers and stages</h2>\n<table><tr><th>layer</th><th>"
          "stage</th><th>pipeline rank</th><th>parameters of</th></tr>";
  for (const json &l : layers) {
    int64_t index = 0, stage = 0;
    std::string name;
    if (!field(l, "index", "layers[].", index, error) ||
        !field(l, "stage", "layers[].", stage, error) ||
        !field(l, "name", "layers[].", name, error))
      return false;
    auto holder = rankOfStage.find(stage);
    body += "<tr><td class=\"num\">" + std::to_string(index) +
            "</td><td class=\"num\">" + std::to_string(stage) +
            "</td><td class=\"num\">" +
            (holder != rankOfStage.end() ? std::to_string(holder->second)
                                         : std::string("-")) +
            "</td><td>" + esc(name) + "</td></tr>";
  }
  body += "</table>\n";

  // Memory per pipeline rank, stacked.
  body += "<h2>Memory per rank (estimate)</h2>\n";
  {
    const char *const *parts = kMemoryParts;
    const double W = 900, L = 150, R = 110, rowH = 28;
    double H = rowH * double(memory.size()) + 40;
    std::string svg = "<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"" +
                      num(W) + "\" height=\"" + num(H) + "\">";
    size_t row = 0;
    for (const RankMemory &m : memoryOf) {
      double y = 5 + rowH * double(row++), x = L, total = m.total();
      svg += "<text x=\"144\" y=\"" + num(y + 15) +
             "\" font-size=\"12\" text-anchor=\"end\">pipeline rank " +
             std::to_string(m.pipelineRank) + "</text>";
      for (size_t k = 0; k < 5; ++k) {
        double bytes = std::max(0.0, m.bytes[k]);
        double w = fullest > 0 ? bytes / fullest * (W - L - R) : 0;
        if (w > 0)
          svg += "<rect x=\"" + num(x, 7) + "\" y=\"" + num(y) + "\" width=\"" +
                 num(w, 7) + "\" height=\"20\" fill=\"" + kPalette[k] +
                 "\"><title>" + parts[k] + ": " + megabytes(bytes) +
                 "</title></rect>";
        x += w;
      }
      svg += "<text x=\"" + num(x + 6, 7) + "\" y=\"" + num(y + 15) +
             "\" font-size=\"11\">" + megabytes(total) + "</text>";
    }
    double kx = L;
    for (size_t k = 0; k < 5; ++k) {
      svg += "<rect x=\"" + num(kx) + "\" y=\"" + num(H - 22) +
             "\" width=\"10\" height=\"10\" fill=\"" + kPalette[k] +
             "\"/><text x=\"" + num(kx + 14) + "\" y=\"" + num(H - 13) +
             "\" font-size=\"11\">" + parts[k] + "</text>";
      kx += 40 + 7 * double(std::string(parts[k]).size());
    }
    body += svg + "</svg>\n";
  }

  // Collectives.
  body += "<h2>Collectives per layer</h2>\n";
  if (collectives.empty()) {
    body += "<p class=\"note\">None: the plan runs on one device, or its "
            "stages exchange only pipeline transfers.</p>\n";
  } else {
    struct Row {
      std::string layer, phase, op;
      std::vector<std::string> axes;
      int64_t stage = 0, count = 0;
      double bytes = 0;
    };
    std::vector<Row> table;
    double most = 1;
    for (const json &c : collectives) {
      Row r;
      if (!field(c, "layer", "collectives[].", r.layer, error) ||
          !field(c, "phase", "collectives[].", r.phase, error) ||
          !field(c, "op", "collectives[].", r.op, error) ||
          !field(c, "axes", "collectives[].", r.axes, error) ||
          !field(c, "stage", "collectives[].", r.stage, error) ||
          !field(c, "count", "collectives[].", r.count, error) ||
          !field(c, "bytes", "collectives[].", r.bytes, error))
        return false;
      most = std::max(most, r.bytes);
      table.push_back(std::move(r));
    }
    body += "<table><tr><th>layer</th><th>stage</th><th>phase</th><th>op"
            "</th><th>mesh axes</th><th>count</th><th>bytes per step "
            "(one micro-batch)</th><th></th></tr>";
    for (const Row &r : table) {
      std::string joined;
      for (const std::string &a : r.axes)
        joined += (joined.empty() ? "" : ", ") + a;
      body += "<tr><td>" + esc(r.layer) + "</td><td class=\"num\">" +
              std::to_string(r.stage) + "</td><td>" + esc(r.phase) +
              "</td><td>" + esc(r.op) + "</td><td>" + esc(joined) +
              "</td><td class=\"num\">" + std::to_string(r.count) +
              "</td><td class=\"num\">" + num(r.bytes, 12) +
              "</td><td><span class=\"bar\" style=\"width:" +
              fixed(200 * std::max(0.0, r.bytes) / most, 1) +
              "px\"></span></td></tr>";
    }
    body += "</table>\n";
  }

  // The schedule.
  if (!pipe.is_object()) {
    body += "<h2>Pipeline schedule</h2>\n<p class=\"note\">No "
            "pipeline.</p>\n";
  } else {
    body += "<h2>Pipeline schedule (unit-time simulation): bubble " + bubble +
            "</h2>\n";
    std::vector<std::string> names;
    std::vector<std::vector<Box>> rowsOfBoxes;
    const json &tasks = pipe.contains("tasks") ? pipe["tasks"] : json();
    if (!tasks.is_array()) {
      error = "missing field pipeline.tasks";
      return false;
    }
    for (size_t r = 0; r < tasks.size(); ++r) {
      names.push_back("pipeline rank " + std::to_string(r));
      if (!tasks[r].is_array()) {
        error = "field pipeline.tasks[] has the wrong type";
        return false;
      }
      std::vector<Box> row;
      for (const json &t : tasks[r]) {
        std::string kind;
        int64_t stage = 0, micro = 0;
        double start = 0, end = 0;
        if (!field(t, "kind", "pipeline.tasks[][].", kind, error) ||
            !field(t, "stage", "pipeline.tasks[][].", stage, error) ||
            !field(t, "micro", "pipeline.tasks[][].", micro, error) ||
            !field(t, "start", "pipeline.tasks[][].", start, error) ||
            !field(t, "end", "pipeline.tasks[][].", end, error))
          return false;
        row.push_back({start, end, kind, std::to_string(micro),
                       kind + "(" + std::to_string(stage) + "," +
                           std::to_string(micro) + ") " + num(start) + "-" +
                           num(end)});
      }
      rowsOfBoxes.push_back(row);
    }
    body += gantt(names, rowsOfBoxes,
                  "time (F = 1, B = 2 or 1 when W is split off, W = 1)");
  }
  html = page("Merak plan: " + source, body);
  return true;
}

bool renderRun(const std::string &jsonl, const std::string &jsonlName,
               const json &trace, std::string &html, std::string &error) {
  struct Step {
    std::optional<double> loss;
    std::optional<double> rate, ms;
  };
  std::map<int64_t, Step> steps;
  std::map<int64_t, double> evals;
  std::string unit = "samples/s";
  std::istringstream in(jsonl);
  std::string line;
  int number = 0;
  while (std::getline(in, line)) {
    ++number;
    if (line.find_first_not_of(" \t\r") == std::string::npos)
      continue;
    json record;
    try {
      record = json::parse(line);
    } catch (const std::exception &) {
      error = jsonlName + ":" + std::to_string(number) + ": not JSON";
      return false;
    }
    if (!record.is_object() || !record.contains("step") ||
        !record["step"].is_number_integer()) {
      error = jsonlName + ":" + std::to_string(number) +
              ": a record needs an integer step";
      return false;
    }
    int64_t step = record["step"].get<int64_t>();
    auto number_of = [&](const char *key) -> std::optional<double> {
      if (record.contains(key) && record[key].is_number()) {
        double v = record[key].get<double>();
        if (std::isfinite(v))
          return v;
      }
      return std::nullopt;
    };
    if (record.contains("val_loss")) {
      if (auto v = number_of("val_loss"))
        evals[step] = *v;
      continue;
    }
    Step s;
    s.loss = number_of("loss");
    s.ms = number_of("ms");
    if (auto r = number_of("tokens_per_s")) {
      s.rate = r;
      unit = "tokens/s";
    } else {
      s.rate = number_of("samples_per_s");
    }
    steps[step] = s; // a resumed run's record replaces the earlier one
  }
  if (steps.empty() && evals.empty()) {
    error = jsonlName + ": no step records";
    return false;
  }
  Series loss{"train loss", "#4e79a7", {}},
      val{"validation loss", "#e15759", {}, true};
  Series rate{unit, "#59a14f", {}}, ms{"step ms", "#f28e2b", {}};
  std::vector<double> losses, times, rates;
  for (const auto &[step, s] : steps) {
    if (s.loss) {
      loss.points.push_back({double(step), *s.loss});
      losses.push_back(*s.loss);
    }
    if (s.rate) {
      rate.points.push_back({double(step), *s.rate});
      rates.push_back(*s.rate);
    }
    if (s.ms) {
      ms.points.push_back({double(step), *s.ms});
      times.push_back(*s.ms);
    }
  }
  for (const auto &[step, v] : evals)
    val.points.push_back({double(step), v});
  auto median = [](std::vector<double> v) {
    if (v.empty())
      return std::nan("");
    std::sort(v.begin(), v.end());
    return v[v.size() / 2];
  };
  std::vector<std::pair<std::string, std::string>> rows = {
      {"log", jsonlName}, {"steps", std::to_string(steps.size())}};
  if (!losses.empty()) {
    rows.push_back(
        {"loss: first, last, lowest",
         num(losses.front(), 6) + ", " + num(losses.back(), 6) + ", " +
             num(*std::min_element(losses.begin(), losses.end()), 6)});
  }
  if (!evals.empty())
    rows.push_back({"validation loss (last, after step " +
                        std::to_string(evals.rbegin()->first) + ")",
                    num(evals.rbegin()->second, 6) + " (perplexity " +
                        num(std::exp(evals.rbegin()->second), 5) + ")"});
  if (!times.empty())
    rows.push_back({"median step time", fixed(median(times), 1) + " ms"});
  if (!rates.empty())
    rows.push_back({"median rate", fixed(median(rates), 1) + " " + unit});
  std::string body = summaryTable(rows);
  body += "<h2>Loss</h2>\n";
  std::vector<Series> lossSeries = {loss};
  if (!val.points.empty())
    lossSeries.push_back(val);
  body += lineChart(lossSeries, "loss");
  body += "<h2>Throughput</h2>\n" + lineChart({rate}, unit);
  body += "<h2>Step time</h2>\n" + lineChart({ms}, "ms");

  body += "<h2>Measured timeline</h2>\n";
  if (trace.is_null()) {
    body += "<p class=\"note\">No trace given (merak-exec --trace).</p>\n";
  } else {
    const json &events = trace.is_object() && trace.contains("traceEvents")
                             ? trace["traceEvents"]
                             : trace;
    if (!events.is_array()) {
      error = "the trace has no traceEvents list";
      return false;
    }
    std::map<int64_t, std::string> processNames;
    std::optional<int64_t> firstStep;
    for (const json &e : events) {
      if (!e.is_object())
        continue;
      std::string ph = stringOr(e, "ph", "");
      const json args = e.contains("args") ? e["args"] : json();
      if (ph == "M" && stringOr(e, "name", "") == "process_name")
        processNames[integerOr(e, "pid", 0)] = stringOr(args, "name", "");
      if (ph == "X" && args.is_object() && args.contains("step") &&
          args["step"].is_number_integer()) {
        int64_t s = args["step"].get<int64_t>();
        firstStep = firstStep ? std::min(*firstStep, s) : s;
      }
    }
    std::map<int64_t, std::vector<Box>> byProcess;
    for (const json &e : events) {
      std::optional<double> start = finiteAt(e, "ts"),
                            length = finiteAt(e, "dur");
      if (stringOr(e, "ph", "") != "X" || !start || !length)
        continue;
      // An event of another step is left out; one without a step is kept.
      if (firstStep && e.contains("args") && e["args"].is_object() &&
          integerOr(e["args"], "step", *firstStep) != *firstStep)
        continue;
      double ts = *start / 1000, dur = *length / 1000;
      std::string cat = stringOr(e, "cat", "other"),
                  name = stringOr(e, "name", "");
      byProcess[integerOr(e, "pid", 0)].push_back(
          {ts, ts + dur, cat, "", name + " " + fixed(dur, 2) + " ms",
           integerOr(e, "tid", 0) != 0});
    }
    std::vector<std::string> names;
    std::vector<std::vector<Box>> boxes;
    for (auto &[pid, row] : byProcess) {
      auto it = processNames.find(pid);
      names.push_back(it != processNames.end() && !it->second.empty()
                          ? it->second
                          : "process " + std::to_string(pid));
      boxes.push_back(std::move(row));
    }
    if (firstStep)
      body += "<p class=\"note\">Step " + std::to_string(*firstStep) +
              ": compute (tall) and transfers (thin), per rank.</p>\n";
    body += gantt(names, boxes, "ms");
  }
  html = page("Merak run: " + jsonlName, body);
  return true;
}

} // namespace

// The readers above check every field they use; the catch is a net for one
// they missed, so that odd input is an error and never ends the program.
bool renderPlanReport(const json &plan, std::string &html, std::string &error) {
  try {
    return renderPlan(plan, html, error);
  } catch (const std::exception &e) {
    error = std::string("the plan summary is ill-formed: ") + e.what();
    return false;
  }
}

bool renderRunReport(const std::string &jsonl, const std::string &jsonlName,
                     const json &trace, std::string &html, std::string &error) {
  try {
    return renderRun(jsonl, jsonlName, trace, html, error);
  } catch (const std::exception &e) {
    error = jsonlName + ": ill-formed log or trace: " + e.what();
    return false;
  }
}

} // namespace merak::driver
