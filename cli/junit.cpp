// JUnit XML for `kiln validate --junit FILE`: one test case per self-test x output.
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <sstream>

#include "commands.h"

namespace kiln::cli {
namespace {

using json = nlohmann::ordered_json;

std::string number_text(const json& v) {
  if (v.is_null()) return "inf";  // nlohmann writes a non-finite double as null
  if (v.is_number_float()) {
    char buf[32];
    std::snprintf(buf, sizeof(buf), "%.6g", v.get<double>());
    return buf;
  }
  return v.dump();
}

// The statistics of one output's report, "key=value" separated by spaces.
std::string statistics(const json& out) {
  std::string text;
  auto add = [&](const char* key, const json& v) { text += (text.empty() ? "" : " ") + std::string(key) + "=" + number_text(v); };
  for (const char* key : {"max_abs_diff", "max_rel_diff", "worst_index", "mismatched"}) {
    if (out.contains(key)) add(key, out[key]);
  }
  if (out.contains("tolerance")) {
    add("rtol", out["tolerance"]["rtol"]);
    add("atol", out["tolerance"]["atol"]);
  }
  if (out.contains("shape")) text += " shape=" + out["shape"].dump();
  if (out.contains("expected")) text += (text.empty() ? "" : " ") + ("expected=" + out["expected"].dump() + " got=" + out["got"].dump());
  return text;
}

}  // namespace

std::string xml_escape(std::string_view raw) {
  const std::string text = printable(raw);  // valid UTF-8 without C0 controls but \t and \n
  std::string out;
  out.reserve(text.size());
  for (std::size_t i = 0; i < text.size(); ++i) {
    const char c = text[i];
    // U+FFFE and U+FFFF are not XML characters either.
    if (c == '\xef' && i + 2 < text.size() && text[i + 1] == '\xbf' && (text[i + 2] == '\xbe' || text[i + 2] == '\xbf')) {
      out += text[i + 2] == '\xbe' ? "\\uFFFE" : "\\uFFFF";
      i += 2;
      continue;
    }
    switch (c) {
      case '&': out += "&amp;"; break;
      case '<': out += "&lt;"; break;
      case '>': out += "&gt;"; break;
      case '"': out += "&quot;"; break;
      case '\'': out += "&apos;"; break;
      case '\n': out += "&#10;"; break;  // kept in attribute values too
      case '\t': out += "&#9;"; break;
      default: out += c;
    }
  }
  return out;
}

std::string junit_xml(const std::string& bundle, const std::string& backend, const json& tests, const std::string& load_error) {
  const std::string suite = std::filesystem::path(bundle).filename().string();
  std::ostringstream cases;
  std::size_t count = 0, failures = 0, errors = 0;
  double total = 0.0;
  auto testcase = [&](const std::string& classname, const std::string& name, double seconds, const std::string& body) {
    ++count;
    char time[32];
    std::snprintf(time, sizeof(time), "%.6f", seconds);
    cases << "    <testcase classname=\"" << xml_escape(classname) << "\" name=\"" << xml_escape(name) << "\" time=\"" << time << "\"";
    if (body.empty()) {
      cases << "/>\n";
    } else {
      cases << ">\n" << body << "    </testcase>\n";
    }
  };
  auto element = [](const std::string& tag, const std::string& type, const std::string& message, const std::string& text) {
    return "      <" + tag + " type=\"" + xml_escape(type) + "\" message=\"" + xml_escape(message) + "\">" + xml_escape(text) + "</" + tag + ">\n";
  };
  if (!load_error.empty()) {
    ++errors;
    testcase(suite, "load and verify", 0.0, element("error", "invalid_bundle", load_error, load_error));
  }
  for (const json& t : tests) {
    const std::string classname = suite + "." + t["name"].get<std::string>();
    const double seconds = t.value("seconds", 0.0);
    total += seconds;
    const std::size_t n = t.value("expected_outputs", std::size_t{0});
    if (t.contains("error")) {  // the self-test could not run: every output is an error
      const std::string message = t["error"].get<std::string>();
      for (std::size_t k = 0; k < std::max<std::size_t>(n, 1); ++k) {
        ++errors;
        testcase(classname, "output " + std::to_string(k), seconds, element("error", t.value("error_code", std::string("error")), message, message));
      }
      continue;
    }
    for (const json& out : t["outputs"]) {
      const std::string name = "output " + std::to_string(out["index"].get<std::size_t>());
      if (out["passed"].get<bool>()) {
        testcase(classname, name, seconds, "");
        continue;
      }
      ++failures;
      const std::string stats = statistics(out);
      std::string message = out.contains("error") ? out["error"].get<std::string>()
                            : out.contains("expected") ? "expected " + out["expected"].dump() + ", got " + out["got"].dump()
                            : number_text(out["mismatched"]) + " elements outside the tolerance, max |diff| " + number_text(out["max_abs_diff"]) +
                                  " at index " + number_text(out["worst_index"]);
      testcase(classname, name, seconds, element("failure", "tolerance", message, stats));
    }
  }
  std::ostringstream xml;
  char time[32];
  std::snprintf(time, sizeof(time), "%.6f", total);
  const std::string totals = "tests=\"" + std::to_string(count) + "\" failures=\"" + std::to_string(failures) + "\" errors=\"" +
                             std::to_string(errors) + "\" time=\"" + time + "\"";
  xml << "<?xml version=\"1.0\" encoding=\"UTF-8\"?>\n"
      << "<testsuites name=\"kiln validate\" " << totals << ">\n"
      << "  <testsuite name=\"" << xml_escape(suite) << "\" " << totals << ">\n"
      << "    <properties>\n"
      << "      <property name=\"bundle\" value=\"" << xml_escape(bundle) << "\"/>\n"
      << "      <property name=\"backend\" value=\"" << xml_escape(backend) << "\"/>\n"
      << "    </properties>\n"
      << cases.str() << "  </testsuite>\n</testsuites>\n";
  return xml.str();
}

}  // namespace kiln::cli
