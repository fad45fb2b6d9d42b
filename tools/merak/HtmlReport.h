//===- HtmlReport.h - plans and runs as self-contained HTML ----*- C++ -*-===//
//
// `merak report`'s pages: inline SVG and CSS, no script and nothing fetched
// when the page is viewed. The plan page draws a merak-plan-v1 summary
// (`merak-translate --merak-to-plan-summary`); the run page a merak-exec
// JSONL log and, when given, its Chrome trace (docs/reports.md).
//
//===----------------------------------------------------------------------===//

#ifndef MERAK_TOOLS_MERAK_HTMLREPORT_H
#define MERAK_TOOLS_MERAK_HTMLREPORT_H

#include <nlohmann/json.hpp>

#include <string>

namespace merak::driver {

/// The plan page of `plan`; false with `error` naming the field that is
/// missing or of the wrong type.
bool renderPlanReport(const nlohmann::json &plan, std::string &html,
                      std::string &error);

/// The run page of the JSONL log `jsonl` (named `jsonlName` in errors and
/// the title) and the parsed trace `trace` (null: none); false with `error`
/// naming the line or the field that is wrong.
bool renderRunReport(const std::string &jsonl, const std::string &jsonlName,
                     const nlohmann::json &trace, std::string &html,
                     std::string &error);

} // namespace merak::driver

#endif // MERAK_TOOLS_MERAK_HTMLREPORT_H
