//===- PipelineScheduleTest.cpp - pipeline schedules and their proof ------===//

#include "merak/Analysis/PipelineSchedule.h"

#include "gtest/gtest.h"

using namespace merak::pipeline;

namespace {

PipelineShape shape(int pp, int m, int v = 1, bool recompute = false) {
  PipelineShape s;
  s.pp = pp;
  s.microbatches = m;
  s.virtualStages = v;
  s.recompute.assign(pp * v, recompute);
  return s;
}

Schedule build(ScheduleKind kind, const PipelineShape &s) {
  llvm::Expected<Schedule> schedule = buildSchedule(kind, s);
  if (!schedule) {
    ADD_FAILURE() << llvm::toString(schedule.takeError());
    return Schedule();
  }
  return *schedule;
}

bool startsWith(const std::string &text, const std::string &prefix) {
  return text.rfind(prefix, 0) == 0;
}

std::string error(llvm::Error e) {
  return e ? llvm::toString(std::move(e)) : std::string();
}

std::string buildError(ScheduleKind kind, const PipelineShape &s) {
  llvm::Expected<Schedule> schedule = buildSchedule(kind, s);
  return schedule ? std::string() : llvm::toString(schedule.takeError());
}

TEST(PipelineSchedule, TaskSyntaxRoundTrips) {
  for (const char *text : {"F(0,3)", "FK(2,0)", "R(1,7)", "B(3,3)", "W(0,0)",
                           "send F(0,3) -> 1", "recv B(2,5) <- 2"}) {
    std::optional<Task> task = Task::parse(text);
    ASSERT_TRUE(task) << text;
    EXPECT_EQ(task->str(), text);
  }
  for (const char *bad :
       {"X(0,1)", "F(0)", "send W(0,1) -> 1", "recv F(0,1)", "F(-1,0)"})
    EXPECT_FALSE(Task::parse(bad)) << bad;
  EXPECT_EQ(parseScheduleKind("zb-h1"), ScheduleKind::ZeroBubbleH1);
  EXPECT_FALSE(parseScheduleKind("pipedream"));
}

TEST(PipelineSchedule, GPipeRunsAllForwardsThenAllBackwards) {
  Schedule s = build(ScheduleKind::GPipe, shape(4, 8));
  EXPECT_EQ(formatComputeOrder(s, 2),
            "F(2,0) F(2,1) F(2,2) F(2,3) F(2,4) F(2,5) F(2,6) F(2,7) "
            "B(2,0) B(2,1) B(2,2) B(2,3) B(2,4) B(2,5) B(2,6) B(2,7)");
}

TEST(PipelineSchedule, OneFOneBWarmsUpThenAlternates) {
  Schedule s = build(ScheduleKind::OneFOneB, shape(4, 8));
  EXPECT_EQ(formatComputeOrder(s, 0),
            "F(0,0) F(0,1) F(0,2) F(0,3) B(0,0) F(0,4) B(0,1) F(0,5) B(0,2) "
            "F(0,6) B(0,3) F(0,7) B(0,4) B(0,5) B(0,6) B(0,7)");
  EXPECT_EQ(formatComputeOrder(s, 3),
            "F(3,0) B(3,0) F(3,1) B(3,1) F(3,2) B(3,2) F(3,3) B(3,3) F(3,4) "
            "B(3,4) F(3,5) B(3,5) F(3,6) B(3,6) F(3,7) B(3,7)");
  // Unit times: (m + p - 1) * (F + B) = 11 * 3.
  llvm::Expected<Simulation> sim = simulate(s);
  ASSERT_TRUE(bool(sim));
  EXPECT_DOUBLE_EQ(sim->makespan, 33);
}

TEST(PipelineSchedule, ZeroBubbleH1DefersWeightGradients) {
  Schedule s = build(ScheduleKind::ZeroBubbleH1, shape(4, 8));
  EXPECT_TRUE(s.splitBackward);
  // Rank r defers W by r steady-state steps.
  EXPECT_PRED2(startsWith, formatComputeOrder(s, 0),
               "F(0,0) F(0,1) F(0,2) F(0,3) B(0,0) W(0,0)");
  EXPECT_EQ(formatComputeOrder(s, 3),
            "F(3,0) B(3,0) F(3,1) B(3,1) F(3,2) B(3,2) F(3,3) B(3,3) W(3,0) "
            "F(3,4) B(3,4) W(3,1) F(3,5) B(3,5) W(3,2) F(3,6) B(3,6) W(3,3) "
            "F(3,7) B(3,7) W(3,4) W(3,5) W(3,6) W(3,7)");
  // A third of 1F1B's bubble: (p - 1) * W instead of (p - 1) * (F + B + W).
  llvm::Expected<Simulation> sim = simulate(s);
  ASSERT_TRUE(bool(sim));
  EXPECT_DOUBLE_EQ(sim->makespan, 8 * 3 + 3);
}

TEST(PipelineSchedule, InterleavedFollowsMegatron) {
  Schedule s = build(ScheduleKind::Interleaved1F1B, shape(4, 8, 2));
  // Rank 0 warms up with (p - 1) * 2 + (v - 1) * p = 10 forwards, chunk 0
  // (stage 0) and chunk 1 (stage 4) in groups of p micro-batches.
  EXPECT_PRED2(startsWith, formatComputeOrder(s, 0),
               "F(0,0) F(0,1) F(0,2) F(0,3) F(4,0) F(4,1) F(4,2) F(4,3) F(0,4) "
               "F(0,5) F(0,6) B(4,0)");
  llvm::Expected<Simulation> interleaved = simulate(s);
  llvm::Expected<Simulation> plain =
      simulate(build(ScheduleKind::OneFOneB, shape(4, 8)));
  ASSERT_TRUE(interleaved && plain);
  EXPECT_LT(interleaved->bubble(), plain->bubble());
}

TEST(PipelineSchedule, MerakSchedulesKeepAndRecompute) {
  Schedule lnr =
      build(ScheduleKind::MerakLastNoRecompute, shape(4, 8, 1, true));
  // The last stage never recomputes; the others recompute before backward.
  EXPECT_PRED2(startsWith, formatComputeOrder(lnr, 3),
               "FK(3,0) B(3,0) FK(3,1) B(3,1)");
  EXPECT_PRED2(startsWith, formatComputeOrder(lnr, 1),
               "F(1,0) F(1,1) F(1,2) R(1,0) B(1,0)");
  Schedule scp =
      build(ScheduleKind::MerakShiftedCriticalPath, shape(4, 8, 1, true));
  EXPECT_FALSE(scp.recomputeAfterGradient);
  // Stage S-2 runs its third forward in its first backward's slot.
  EXPECT_PRED2(startsWith, formatComputeOrder(scp, 2),
               "FK(2,0) FK(2,1) F(2,2) B(2,0) B(2,1)");
  llvm::Expected<Simulation> a =
      simulate(build(ScheduleKind::OneFOneB, shape(4, 8, 1, true)));
  llvm::Expected<Simulation> b = simulate(lnr);
  llvm::Expected<Simulation> c = simulate(scp);
  ASSERT_TRUE(a && b && c);
  EXPECT_LT(b->makespan, a->makespan);
  EXPECT_LE(c->makespan, b->makespan);
}

TEST(PipelineSchedule, DynamicRespectsInflightLimits) {
  Schedule s = build(ScheduleKind::Dynamic, shape(4, 8));
  ASSERT_EQ(s.inflightLimit, (std::vector<int>{4, 3, 2, 1}));
  EXPECT_FALSE(s.priority.empty());
  for (int r = 0; r < 4; ++r) {
    int inflight = 0, peak = 0;
    for (const Task &t : s.ranks[r]) {
      if (t.kind == TaskKind::Forward)
        peak = std::max(peak, ++inflight);
      if (t.kind == TaskKind::Backward)
        --inflight;
    }
    EXPECT_LE(peak, s.inflightLimit[r]);
  }
  Schedule v = build(ScheduleKind::Dynamic, shape(2, 4, 2));
  EXPECT_FALSE(error(verifySchedule(v)).size());
}

TEST(PipelineSchedule, EveryKindVerifies) {
  for (ScheduleKind kind :
       {ScheduleKind::GPipe, ScheduleKind::OneFOneB,
        ScheduleKind::Interleaved1F1B, ScheduleKind::MerakLastNoRecompute,
        ScheduleKind::MerakShiftedCriticalPath, ScheduleKind::ZeroBubbleH1,
        ScheduleKind::Dynamic})
    for (int pp : {1, 2, 3, 4})
      for (int m : {4, 8, 12})
        for (bool recompute : {false, true}) {
          PipelineShape s = shape(pp, m, 1, recompute);
          if (kind == ScheduleKind::MerakShiftedCriticalPath && pp < 2)
            continue;
          llvm::Expected<Schedule> schedule = buildSchedule(kind, s);
          ASSERT_TRUE(bool(schedule))
              << stringifyScheduleKind(kind).str() << " pp=" << pp << " m=" << m
              << ": " << llvm::toString(schedule.takeError());
          EXPECT_EQ(error(verifySchedule(*schedule)), "");
        }
}

TEST(PipelineSchedule, InvalidCombinations) {
  EXPECT_NE(buildError(ScheduleKind::OneFOneB, shape(4, 2))
                .find("microbatches=2 < pp=4"),
            std::string::npos);
  EXPECT_NE(buildError(ScheduleKind::MerakShiftedCriticalPath, shape(2, 3))
                .find("at least 4 micro-batches"),
            std::string::npos);
  EXPECT_NE(buildError(ScheduleKind::OneFOneB, shape(2, 4, 2))
                .find("virtual=2 needs kind=interleaved-1f1b"),
            std::string::npos);
  EXPECT_NE(buildError(ScheduleKind::Interleaved1F1B, shape(4, 6, 2))
                .find("not a multiple of pp=4"),
            std::string::npos);
  EXPECT_EQ(buildError(ScheduleKind::GPipe, shape(4, 2)), "");
}

TEST(PipelineSchedule, VerifierFindsMissingAndMisplacedTasks) {
  Schedule s = build(ScheduleKind::OneFOneB, shape(2, 2));
  Schedule missing = s;
  llvm::erase_if(missing.ranks[1],
                 [](const Task &t) { return t.str() == "B(1,1)"; });
  EXPECT_NE(error(verifySchedule(missing)).find("B(1,1) never runs"),
            std::string::npos);
  Schedule wrongRank = s;
  wrongRank.ranks[0].push_back(Task{TaskKind::Forward, 1, 0});
  EXPECT_NE(error(verifySchedule(wrongRank)).find("stage 1 runs on rank 1"),
            std::string::npos);
  Schedule twice = s;
  twice.ranks[0].push_back(Task{TaskKind::Backward, 0, 0});
  EXPECT_NE(error(verifySchedule(twice)).find("runs twice"), std::string::npos);
}

TEST(PipelineSchedule, VerifierFindsDeadlock) {
  // 1F1B on two ranks with each send right after its task and each
  // receive right before: rank 0 sends F(0,1) while rank 1 sends B(1,0),
  // and with blocking sends neither is received.
  Schedule s;
  s.kind = ScheduleKind::OneFOneB;
  s.shape = shape(2, 2);
  auto t = [](const char *text) { return *Task::parse(text); };
  s.ranks = {
      {t("F(0,0)"), t("send F(0,0) -> 1"), t("F(0,1)"), t("send F(0,1) -> 1"),
       t("recv B(1,0) <- 1"), t("B(0,0)"), t("recv B(1,1) <- 1"), t("B(0,1)")},
      {t("recv F(0,0) <- 0"), t("F(1,0)"), t("B(1,0)"), t("send B(1,0) -> 0"),
       t("recv F(0,1) <- 0"), t("F(1,1)"), t("B(1,1)"), t("send B(1,1) -> 0")}};
  std::string message = error(verifySchedule(s));
  EXPECT_NE(message.find("deadlock"), std::string::npos) << message;
  EXPECT_NE(message.find("rank 0 blocks in 'send F(0,1) -> 1'"),
            std::string::npos)
      << message;
  // Placing the transfers from the timeline fixes it.
  ASSERT_FALSE(bool(placeCommunication(s)));
  EXPECT_EQ(error(verifySchedule(s)), "");
}

TEST(PipelineSchedule, VerifierFindsLateReceive) {
  Schedule s = build(ScheduleKind::GPipe, shape(2, 1));
  // Move rank 1's receive after the forward that reads it.
  auto &rank1 = s.ranks[1];
  ASSERT_EQ(rank1[0].str(), "recv F(0,0) <- 0");
  std::swap(rank1[0], rank1[1]);
  EXPECT_NE(error(verifySchedule(s)).find("after F(1,0), which reads them"),
            std::string::npos);
}

} // namespace
