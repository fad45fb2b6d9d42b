//===- HtmlReportTest.cpp - merak report's pages --------------------------===//

#include "HtmlReport.h"

#include <gtest/gtest.h>

#include <regex>
#include <string>

using merak::driver::renderPlanReport;
using merak::driver::renderRunReport;
using nlohmann::json;

namespace {

size_t count(const std::string &text, const std::string &what) {
  size_t n = 0;
  for (size_t at = text.find(what); at != std::string::npos;
       at = text.find(what, at + 1))
    ++n;
  return n;
}

/// The `x` (or `width`) attribute of every `<rect ...>` with a title
/// starting with `title`.
std::vector<double> rectsOf(const std::string &html, const std::string &title,
                            bool width) {
  std::vector<double> values;
  std::regex rect(
      R"re(<rect x="([^"]*)" y="[^"]*" width="([^"]*)"[^>]*><title>)re" +
      title);
  for (auto it = std::sregex_iterator(html.begin(), html.end(), rect);
       it != std::sregex_iterator(); ++it)
    values.push_back(std::stod((*it)[width ? 2 : 1]));
  return values;
}

std::vector<double> widthsOf(const std::string &html,
                             const std::string &title) {
  return rectsOf(html, title, /*width=*/true);
}

json samplePlan() {
  return json::parse(R"({
    "format": "merak-plan-v1", "source": "plan<1>.mlir", "ranks": 4,
    "mesh": {"axes": ["dp"], "shape": [2]},
    "rank_layout": [
      {"rank": 0, "pipeline_rank": 0, "coords": [0]},
      {"rank": 1, "pipeline_rank": 0, "coords": [1]},
      {"rank": 2, "pipeline_rank": 1, "coords": [0]},
      {"rank": 3, "pipeline_rank": 1, "coords": [1]}],
    "layers": [{"index": 0, "name": "h.0", "stage": 0},
               {"index": 1, "name": "h.1 <head>", "stage": 1}],
    "pipeline": {"schedule": "gpipe", "pp": 2, "virtual": 1,
      "microbatches": 2, "bubble": 0.3333333333333333,
      "stages": [{"stage": 0, "pipeline_rank": 0, "layers": [0]},
                 {"stage": 1, "pipeline_rank": 1, "layers": [1]}],
      "tasks": [
        [{"kind": "F", "stage": 0, "micro": 0, "start": 0, "end": 1},
         {"kind": "F", "stage": 0, "micro": 1, "start": 1, "end": 2},
         {"kind": "B", "stage": 0, "micro": 0, "start": 4, "end": 6},
         {"kind": "B", "stage": 0, "micro": 1, "start": 6, "end": 8}],
        [{"kind": "F", "stage": 1, "micro": 0, "start": 1, "end": 2},
         {"kind": "F", "stage": 1, "micro": 1, "start": 2, "end": 3},
         {"kind": "B", "stage": 1, "micro": 0, "start": 3, "end": 5},
         {"kind": "B", "stage": 1, "micro": 1, "start": 5, "end": 7}]]},
    "memory": [
      {"pipeline_rank": 0, "parameters": 1000000, "gradients": 1000000,
       "optimizer_state": 2000000, "activations": 500000, "buffers": 0},
      {"pipeline_rank": 1, "parameters": 500000, "gradients": 500000,
       "optimizer_state": 1000000, "activations": 250000, "buffers": 0}],
    "collectives": [{"layer": "the update", "stage": 0, "phase": "update",
      "op": "all_reduce", "axes": ["dp"], "count": 2, "bytes": 4096}]
})");
}

TEST(HtmlReportTest, PlanPageDrawsEveryPart) {
  std::string html, error;
  ASSERT_TRUE(renderPlanReport(samplePlan(), html, error)) << error;
  EXPECT_NE(html.find("<title>Merak plan: plan&lt;1&gt;.mlir</title>"),
            std::string::npos);
  EXPECT_NE(html.find("gpipe, 2 stages x 1 virtual, 2 micro-batches, bubble "
                      "33.3 %"),
            std::string::npos);
  // Four ranks in the mesh picture; the names are escaped.
  EXPECT_EQ(count(html, ">rank "), 4u);
  EXPECT_NE(html.find("h.1 &lt;head&gt;"), std::string::npos);
  EXPECT_EQ(html.find("<head>h.1"), std::string::npos);
  // Eight tasks, a B twice as wide as an F.
  std::vector<double> f = widthsOf(html, "F\\("), b = widthsOf(html, "B\\(");
  ASSERT_EQ(f.size(), 4u);
  ASSERT_EQ(b.size(), 4u);
  EXPECT_NEAR(b[0], 2 * f[0], 1e-3);
  // Boxes start in proportion to their start: rank 0's F(0,0) at 0, F(0,1)
  // at 1, B(0,0) at 4 and B(0,1) at 6 of the 0..8 axis.
  std::vector<double> fx = rectsOf(html, "F\\(0,", /*width=*/false),
                      bx = rectsOf(html, "B\\(0,", /*width=*/false);
  ASSERT_EQ(fx.size(), 2u);
  ASSERT_EQ(bx.size(), 2u);
  double unit = fx[1] - fx[0];
  EXPECT_NEAR(f[0], unit, 1e-3);
  EXPECT_NEAR(bx[0] - fx[0], 4 * unit, 1e-3);
  EXPECT_NEAR(bx[1] - fx[0], 6 * unit, 1e-3);
  EXPECT_NE(html.find("(unit-time simulation): bubble 33.3 %</h2>"),
            std::string::npos);
  // Each row of ranks says which stage it runs.
  EXPECT_NE(html.find(">stage 1</text>"), std::string::npos);
  // Memory bars in proportion to bytes: rank 1 holds half of rank 0.
  std::vector<double> params = widthsOf(html, "parameters:");
  ASSERT_EQ(params.size(), 2u);
  EXPECT_NEAR(params[1], params[0] / 2, 1e-3);
  EXPECT_NE(html.find(">4.5 MB<"), std::string::npos);
  EXPECT_NE(html.find("all_reduce"), std::string::npos);
  // No script, nothing fetched.
  EXPECT_EQ(html.find("<script"), std::string::npos);
  EXPECT_EQ(html.find("http://") == std::string::npos ||
                html.find("http://www.w3.org/2000/svg") != std::string::npos,
            true);
  EXPECT_EQ(html.find("https://"), std::string::npos);
  std::string again;
  ASSERT_TRUE(renderPlanReport(samplePlan(), again, error));
  EXPECT_EQ(html, again);
}

TEST(HtmlReportTest, IllTypedPlansAreErrorsNotCrashes) {
  std::string html, error;
  json plan = samplePlan();
  plan["memory"][0]["parameters"] = "12";
  EXPECT_FALSE(renderPlanReport(plan, html, error));
  EXPECT_EQ(error, "field memory[].parameters has the wrong type");
  plan = samplePlan();
  plan["memory"] = 3;
  EXPECT_FALSE(renderPlanReport(plan, html, error));
  EXPECT_EQ(error, "field memory has the wrong type");
  plan = samplePlan();
  plan["collectives"][0]["bytes"] = json::array();
  EXPECT_FALSE(renderPlanReport(plan, html, error));
  EXPECT_EQ(error, "field collectives[].bytes has the wrong type");
  plan = samplePlan();
  plan["collectives"][0] = 1;
  EXPECT_FALSE(renderPlanReport(plan, html, error));
  EXPECT_EQ(error, "field collectives[] has the wrong type");
  plan = samplePlan();
  plan["pipeline"]["stages"][0] = nullptr;
  EXPECT_FALSE(renderPlanReport(plan, html, error));
  EXPECT_EQ(error, "field pipeline.stages[] has the wrong type");
  plan = samplePlan();
  plan["pipeline"].erase("bubble");
  EXPECT_FALSE(renderPlanReport(plan, html, error));
  EXPECT_EQ(error, "missing field pipeline.bubble");
  plan = samplePlan();
  plan["format"] = 1;
  EXPECT_FALSE(renderPlanReport(plan, html, error));
  EXPECT_EQ(error, "not a merak-plan-v1 summary (field format)");
  // Odd but well-typed: a negative pipeline rank, no activations.
  plan = samplePlan();
  plan["rank_layout"][0]["pipeline_rank"] = -1;
  plan["memory"][0].erase("activations");
  EXPECT_TRUE(renderPlanReport(plan, html, error)) << error;
  // Every value of the sample replaced by each other type in turn: an
  // error or a page, never an exception.
  json base = samplePlan(), flat = base.flatten();
  std::vector<json> others = {nullptr,        -1,  0.5, "x", json::array(),
                              json::object(), true};
  for (const auto &[path, value] : flat.items()) {
    std::string at = path;
    for (std::string cut = at; !cut.empty();
         cut = cut.substr(0, cut.rfind('/')))
      for (const json &other : others) {
        json changed = base;
        changed[json::json_pointer(cut)] = other;
        bool ok = true;
        EXPECT_NO_THROW(ok = renderPlanReport(changed, html, error)) << cut;
        // Refused by a reader that names the field, not by the net.
        if (!ok)
          EXPECT_EQ(error.find("ill-formed"), std::string::npos) << error;
      }
  }
}

TEST(HtmlReportTest, PlanWithoutPipelineOrCollectivesSaysSo) {
  json plan = samplePlan();
  plan["pipeline"] = nullptr;
  plan["collectives"] = json::array();
  std::string html, error;
  ASSERT_TRUE(renderPlanReport(plan, html, error)) << error;
  EXPECT_NE(html.find("No pipeline."), std::string::npos);
  EXPECT_NE(html.find("None: the plan runs on one device"), std::string::npos);
}

TEST(HtmlReportTest, BadPlansNameTheField) {
  std::string html, error;
  EXPECT_FALSE(
      renderPlanReport(json::parse(R"({"format": "other"})"), html, error));
  EXPECT_EQ(error, "not a merak-plan-v1 summary (field format)");
  json plan = samplePlan();
  plan.erase("memory");
  EXPECT_FALSE(renderPlanReport(plan, html, error));
  EXPECT_EQ(error, "missing field memory");
  plan = samplePlan();
  plan["pipeline"]["tasks"][0][1]["start"] = "soon";
  EXPECT_FALSE(renderPlanReport(plan, html, error));
  EXPECT_EQ(error, "field pipeline.tasks[][].start has the wrong type");
}

TEST(HtmlReportTest, RunPageDrawsCurvesAndKeepsTheLastRecordOfAStep) {
  std::string log = R"({"step":1,"loss":4.0,"ms":10,"tokens_per_s":100}
{"step":2,"loss":3.5,"ms":12,"tokens_per_s":90}
{"step":2,"val_loss":3.0,"val_ppl":20.08,"eval_batches":2,"eval_ms":1}
{"step":3,"loss":null,"ms":11,"tokens_per_s":95}
{"step":3,"loss":3.25,"ms":11,"tokens_per_s":95}
)";
  std::string html, error;
  ASSERT_TRUE(renderRunReport(log, "run.jsonl", nullptr, html, error)) << error;
  // One polyline per curve: the train loss (3 points: step 3's second
  // record replaces its first), the validation loss (1 point), rate, time.
  std::regex poly(R"re(<polyline[^>]*points="([^"]*)")re");
  std::vector<size_t> points;
  for (auto it = std::sregex_iterator(html.begin(), html.end(), poly);
       it != std::sregex_iterator(); ++it)
    points.push_back(count((*it)[1].str(), ","));
  ASSERT_EQ(points.size(), 4u);
  EXPECT_EQ(points[0], 3u);
  EXPECT_EQ(points[1], 1u);
  EXPECT_EQ(points[2], 3u);
  EXPECT_EQ(points[3], 3u);
  EXPECT_NE(html.find("4, 3.25, 3.25"), std::string::npos);
  EXPECT_NE(html.find("3 (perplexity 20.086)"), std::string::npos);
  EXPECT_NE(html.find("No trace given"), std::string::npos);
  std::string again;
  ASSERT_TRUE(renderRunReport(log, "run.jsonl", nullptr, again, error));
  EXPECT_EQ(html, again);
}

TEST(HtmlReportTest, RunTimelineShowsTheFirstStepOfEachRank) {
  json trace = json::parse(R"js({"traceEvents": [
    {"ph": "M", "name": "process_name", "pid": 0, "args": {"name": "rank 0"}},
    {"ph": "M", "name": "process_name", "pid": 1, "args": {"name": "rank 1"}},
    {"ph": "X", "pid": 0, "tid": 0, "cat": "forward", "name": "F(0,0)",
     "ts": 0, "dur": 1000, "args": {"step": 1}},
    {"ph": "X", "pid": 0, "tid": 1, "cat": "send", "name": "send",
     "ts": 1000, "dur": 200, "args": {"step": 1}},
    {"ph": "X", "pid": 1, "tid": 0, "cat": "forward", "name": "F(1,0)",
     "ts": 1200, "dur": 1000, "args": {"step": 1}},
    {"ph": "X", "pid": 1, "tid": 0, "cat": "forward", "name": "F(1,0)",
     "ts": 9000, "dur": 1000, "args": {"step": 2}}]})js");
  std::string html, error;
  ASSERT_TRUE(renderRunReport("{\"step\":1,\"loss\":1.0,\"ms\":3}\n",
                              "run.jsonl", trace, html, error))
      << error;
  EXPECT_NE(html.find(">rank 0</text>"), std::string::npos);
  EXPECT_NE(html.find(">rank 1</text>"), std::string::npos);
  EXPECT_EQ(count(html, "<title>F("), 2u); // step 2 is left out
  EXPECT_EQ(count(html, "<title>send "), 1u);
  // Odd events are skipped, not refused.
  trace["traceEvents"].push_back(
      {{"ph", 1}, {"pid", "0"}, {"ts", "0"}, {"dur", nullptr}});
  trace["traceEvents"].push_back({{"ph", "X"},
                                  {"pid", "0"},
                                  {"ts", 0},
                                  {"dur", 1},
                                  {"args", {{"step", "x"}}}});
  trace["traceEvents"].push_back(
      {{"ph", "M"}, {"name", "process_name"}, {"pid", 0}, {"args", 3}});
  ASSERT_TRUE(renderRunReport("{\"step\":1,\"loss\":1.0,\"ms\":3}\n",
                              "run.jsonl", trace, html, error))
      << error;
}

TEST(HtmlReportTest, CurvesOfValuesCloseTogetherEnd) {
  // 1e17 and the next double: the axis' ticks must not loop.
  std::string html, error;
  ASSERT_TRUE(renderRunReport("{\"step\":1,\"loss\":1e17}\n"
                              "{\"step\":2,\"loss\":100000000000000016}\n",
                              "run.jsonl", nullptr, html, error))
      << error;
  EXPECT_NE(html.find("<polyline"), std::string::npos);
}

TEST(HtmlReportTest, BadLogsNameTheLine) {
  std::string html, error;
  EXPECT_FALSE(renderRunReport("{\"step\":1,\"loss\":1}\nnot json\n",
                               "run.jsonl", nullptr, html, error));
  EXPECT_EQ(error, "run.jsonl:2: not JSON");
  EXPECT_FALSE(
      renderRunReport("{\"loss\":1}\n", "run.jsonl", nullptr, html, error));
  EXPECT_EQ(error, "run.jsonl:1: a record needs an integer step");
  EXPECT_FALSE(renderRunReport("\n", "run.jsonl", nullptr, html, error));
  EXPECT_EQ(error, "run.jsonl: no step records");
  EXPECT_FALSE(renderRunReport("{\"step\":1,\"loss\":1}\n", "run.jsonl",
                               json::parse("{\"x\": 1}"), html, error));
  EXPECT_EQ(error, "the trace has no traceEvents list");
  EXPECT_FALSE(
      renderRunReport("{\"step\":\"1\"}\n", "run.jsonl", nullptr, html, error));
  EXPECT_EQ(error, "run.jsonl:1: a record needs an integer step");
  // Null and non-numeric losses are left out of the curve.
  ASSERT_TRUE(renderRunReport("{\"step\":1,\"loss\":null}\n"
                              "{\"step\":2,\"loss\":\"nan\"}\n"
                              "{\"step\":3,\"loss\":2}\n",
                              "run.jsonl", nullptr, html, error))
      << error;
  EXPECT_NE(html.find("<th>steps</th><td>3</td>"), std::string::npos);
}

} // namespace
