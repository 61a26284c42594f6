// The textual pattern spec ("a-shape:sink=128,local=4096") and the per-model JSON pattern config.

#include <algorithm>
#include <cctype>
#include <charconv>
#include <nlohmann/json.hpp>
#include <map>
#include <set>
#include <vector>

#include "mmsparse/patterns.h"
#include "mmsparse/status.h"
#include "methods/pattern_names.h"

namespace mmsparse {

namespace {

[[noreturn]] void parse_error(const std::string& message) {
  throw Error(ErrorCode::kParseError, message);
}

std::string_view trim(std::string_view text) {
  const auto first = text.find_first_not_of(" \t\n\r");
  if (first == std::string_view::npos) return {};
  return text.substr(first, text.find_last_not_of(" \t\n\r") - first + 1);
}

bool is_identifier(std::string_view text, bool allow_dash) {
  if (text.empty()) return false;
  return std::all_of(text.begin(), text.end(), [&](char c) {
    return std::isalnum(static_cast<unsigned char>(c)) || c == '_' || (allow_dash && c == '-');
  });
}

// A whole string as an integer (optional leading '-'), or false.
bool parse_integer(std::string_view text, int64_t& value) {
  const char* end = text.data() + text.size();
  const auto [stop, error] = std::from_chars(text.data(), end, value);
  return !text.empty() && error == std::errc() && stop == end;
}

// A list parameter's value, "[a/b/c]" or "[]": '/' rather than ',' (which separates parameters)
// and no shell metacharacter, so that a spec needs no quoting on a command line.
constexpr char kListSeparator = '/';

std::vector<int64_t> parse_list(std::string_view text, const std::string& context) {
  if (text.size() < 2 || text.back() != ']') {
    parse_error(context + "expected a list [a/b/c] closed by ']', got \"" + std::string(text) +
                "\"");
  }
  std::string_view rest = text.substr(1, text.size() - 2);
  std::vector<int64_t> values;
  if (trim(rest).empty()) return values;
  while (true) {
    const auto separator = rest.find(kListSeparator);
    const std::string_view item = trim(rest.substr(0, separator));
    int64_t value = 0;
    if (!parse_integer(item, value)) {
      parse_error(context + "expected integers in the list [a/b/c], got \"" + std::string(item) +
                  "\"");
    }
    values.push_back(value);
    if (separator == std::string_view::npos) return values;
    rest = rest.substr(separator + 1);
  }
}

// --- Pattern config --------------------------------------------------------------------------

// The first version with the search record (provenance and per-head scores).
constexpr int kSearchSchemaVersion = 2;

[[noreturn]] void config_error(const std::string& path, const std::string& message) {
  parse_error("pattern config: " + path + ": " + message);
}

void reject_unknown_keys(const nlohmann::json& object, const std::string& path,
                         const std::set<std::string>& allowed) {
  for (const auto& [key, value] : object.items()) {
    if (allowed.count(key) == 0) {
      std::string known;
      for (const std::string& name : allowed) known += (known.empty() ? "" : ", ") + name;
      config_error(path.empty() ? key : path + "." + key, "unknown key, expected one of " + known);
    }
  }
}

const nlohmann::json& require_object(const nlohmann::json& value, const std::string& path) {
  if (!value.is_object()) config_error(path, "expected a JSON object, got " + value.dump());
  return value;
}

PatternSpec config_spec(const nlohmann::json& value, const std::string& path) {
  if (!value.is_string()) {
    config_error(path,
                 "expected a pattern spec string such as \"a-shape:sink=128,local=4096\", got " +
                     value.dump());
  }
  PatternSpec spec;
  try {
    spec = PatternSpec::parse(value.get<std::string>());
  } catch (const Error& error) {
    config_error(path, error.what());
  }
  if (!is_known_pattern(spec.name)) {
    config_error(path,
                 "unknown pattern \"" + spec.name + "\", expected one of " + known_pattern_names());
  }
  return spec;
}

int64_t config_index(const std::string& key, const std::string& path, const char* what) {
  int64_t index = 0;
  const bool digits_only = !key.empty() && std::all_of(key.begin(), key.end(), [](char c) {
    return std::isdigit(static_cast<unsigned char>(c));
  });
  if (!digits_only || !parse_integer(key, index)) {
    config_error(path + "." + key, std::string("expected a non-negative integer ") + what +
                                       " index as the key, got \"" + key + "\"");
  }
  return index;
}

const nlohmann::json& require_field(const nlohmann::json& object, const std::string& path,
                                   const std::string& key) {
  const auto found = object.find(key);
  if (found == object.end()) config_error(path + "." + key, "missing");
  return *found;
}

std::string string_field(const nlohmann::json& object, const std::string& path,
                         const std::string& key) {
  const nlohmann::json& value = require_field(object, path, key);
  if (!value.is_string()) config_error(path + "." + key, "expected a string, got " + value.dump());
  return value.get<std::string>();
}

double number_field(const nlohmann::json& object, const std::string& path, const std::string& key) {
  const nlohmann::json& value = require_field(object, path, key);
  if (!value.is_number()) config_error(path + "." + key, "expected a number, got " + value.dump());
  return value.get<double>();
}

SearchProvenance read_provenance(const nlohmann::json& value) {
  const std::string path = "search";
  require_object(value, path);
  reject_unknown_keys(value, path,
                      {"calibration", "date_utc", "tool_version", "cost_source", "cost_unit", "gpu",
                       "budget_spec", "budget_cost", "seq_len", "layout"});
  SearchProvenance provenance;
  provenance.calibration = string_field(value, path, "calibration");
  provenance.date_utc = string_field(value, path, "date_utc");
  provenance.tool_version = string_field(value, path, "tool_version");
  provenance.cost_source = string_field(value, path, "cost_source");
  if (provenance.cost_source != "measured" && provenance.cost_source != "modelled") {
    config_error(path + ".cost_source", "expected \"measured\" or \"modelled\", got \"" +
                                            provenance.cost_source + "\"");
  }
  provenance.cost_unit = string_field(value, path, "cost_unit");
  provenance.gpu = string_field(value, path, "gpu");
  provenance.budget_spec = string_field(value, path, "budget_spec");
  provenance.budget_cost = number_field(value, path, "budget_cost");
  if (value.contains("seq_len")) {
    const nlohmann::json& seq_len = value["seq_len"];
    if (!seq_len.is_number_integer() || seq_len.get<int64_t>() < 0) {
      config_error(path + ".seq_len", "expected an integer >= 0, got " + seq_len.dump());
    }
    provenance.seq_len = seq_len.get<int64_t>();
  }
  if (value.contains("layout")) {
    const nlohmann::json& layout = value["layout"];
    if (!layout.is_object()) {
      config_error(path + ".layout", "expected an object, got " + layout.dump());
    }
    provenance.layout = layout.dump();
  }
  return provenance;
}

HeadScore read_score(const nlohmann::json& value, const std::string& path) {
  require_object(value, path);
  reject_unknown_keys(value, path, {"recall", "output_error", "cost"});
  return {number_field(value, path, "recall"), number_field(value, path, "output_error"),
          number_field(value, path, "cost")};
}

}  // namespace

// --- PatternSpec -----------------------------------------------------------------------------

PatternSpec PatternSpec::parse(std::string_view text) {
  const std::string quoted = "pattern spec \"" + std::string(text) + "\": ";
  const std::string_view whole = trim(text);
  const auto colon = whole.find(':');
  PatternSpec spec;
  spec.name = std::string(trim(whole.substr(0, colon)));
  if (!is_identifier(spec.name, true)) {
    parse_error(quoted +
                "expected a pattern name of letters, digits, '-' or '_' (e.g. "
                "\"a-shape:sink=128,local=4096\"), got \"" +
                spec.name + "\"");
  }
  if (colon == std::string_view::npos) return spec;

  std::string_view rest = whole.substr(colon + 1);
  if (trim(rest).empty()) parse_error(quoted + "expected key=value parameters after ':'");
  while (true) {
    const auto comma = rest.find(',');
    const std::string_view item = trim(rest.substr(0, comma));
    const auto equals = item.find('=');
    if (equals == std::string_view::npos) {
      parse_error(quoted + "expected key=value, got \"" + std::string(item) + "\"");
    }
    const std::string key(trim(item.substr(0, equals)));
    const std::string_view value_text = trim(item.substr(equals + 1));
    if (!is_identifier(key, false)) {
      parse_error(quoted + "expected a parameter name of letters, digits or '_', got \"" + key +
                  "\"");
    }
    if (spec.params.count(key) != 0 || spec.lists.count(key) != 0) {
      parse_error(quoted + "parameter " + key + " given twice");
    }
    if (value_text.starts_with('[')) {
      spec.lists.emplace(key, parse_list(value_text, quoted + "parameter " + key + ": "));
    } else {
      int64_t value = 0;
      if (!parse_integer(value_text, value)) {
        parse_error(quoted + "parameter " + key + ": expected an integer, got \"" +
                    std::string(value_text) + "\"");
      }
      spec.params.emplace(key, value);
    }
    if (comma == std::string_view::npos) break;
    rest = rest.substr(comma + 1);
  }
  return spec;
}

std::string PatternSpec::to_string() const {
  // Parameters and lists merged in key order (keys are unique across both).
  std::map<std::string, std::string> values;
  for (const auto& [key, value] : params) values.emplace(key, std::to_string(value));
  for (const auto& [key, list] : lists) {
    std::string text = "[";
    for (std::size_t i = 0; i < list.size(); ++i) {
      if (i > 0) text.push_back(kListSeparator);
      text.append(std::to_string(list[i]));
    }
    text.push_back(']');
    values.emplace(key, text);
  }
  std::string text = name;
  char separator = ':';
  for (const auto& [key, value] : values) {
    text += separator + key + "=" + value;
    separator = ',';
  }
  return text;
}

int64_t PatternSpec::param(const std::string& key, int64_t fallback) const {
  const auto found = params.find(key);
  return found == params.end() ? fallback : found->second;
}

// --- PatternConfig ---------------------------------------------------------------------------

PatternConfig PatternConfig::from_json(const std::string& json_text) {
  nlohmann::json root;
  try {
    root = nlohmann::json::parse(json_text);
  } catch (const nlohmann::json::exception& error) {
    // Not only parse_error: a number beyond double's range ("1e400") throws out_of_range.
    parse_error(std::string("pattern config: invalid JSON: ") + error.what());
  }
  if (!root.is_object()) parse_error("pattern config: expected a JSON object, got " + root.dump());
  const auto version = root.find("schema_version");
  if (version == root.end()) {
    config_error("schema_version", "missing; expected " + std::to_string(kSchemaVersion));
  }
  const bool known_version = version->is_number_integer() &&
                             version->get<int64_t>() >= kOldestSchemaVersion &&
                             version->get<int64_t>() <= kSchemaVersion;
  if (!known_version) {
    config_error("schema_version", "expected " + std::to_string(kOldestSchemaVersion) + " to " +
                                       std::to_string(kSchemaVersion) + ", got " + version->dump());
  }
  // Version 1 has no search record; its files keep being read with version 1's keys only.
  const bool searched = version->get<int64_t>() >= kSearchSchemaVersion;

  if (searched) {
    reject_unknown_keys(root, "", {"schema_version", "default", "layers", "search"});
  } else {
    reject_unknown_keys(root, "", {"schema_version", "default", "layers"});
  }

  PatternConfig config;
  if (searched && root.contains("search")) config.search = read_provenance(root["search"]);
  if (root.contains("default")) config.default_spec = config_spec(root["default"], "default");
  if (!root.contains("layers")) return config;
  for (const auto& [layer_key, layer_value] : require_object(root["layers"], "layers").items()) {
    const int64_t layer = config_index(layer_key, "layers", "layer");
    const std::string layer_path = "layers." + layer_key;
    require_object(layer_value, layer_path);
    if (searched) {
      reject_unknown_keys(layer_value, layer_path, {"default", "heads", "scores"});
    } else {
      reject_unknown_keys(layer_value, layer_path, {"default", "heads"});
    }
    if (layer_value.contains("default")) {
      config.layer_defaults[layer] = config_spec(layer_value["default"], layer_path + ".default");
    }
    if (!layer_value.contains("heads")) continue;
    const std::string heads_path = layer_path + ".heads";
    for (const auto& [head_key, head_value] :
         require_object(layer_value["heads"], heads_path).items()) {
      const int64_t head = config_index(head_key, heads_path, "head");
      config.head_specs[layer][head] = config_spec(head_value, heads_path + "." + head_key);
    }
    if (!layer_value.contains("scores")) continue;
    const std::string scores_path = layer_path + ".scores";
    for (const auto& [head_key, score_value] :
         require_object(layer_value["scores"], scores_path).items()) {
      const int64_t head = config_index(head_key, scores_path, "head");
      config.head_scores[layer][head] = read_score(score_value, scores_path + "." + head_key);
    }
  }
  return config;
}

std::string PatternConfig::to_json() const {
  // ordered_json keeps layers and heads in numeric order, as a reader expects.
  nlohmann::ordered_json root;
  root["schema_version"] = kSchemaVersion;
  if (search) {
    root["search"] = {{"calibration", search->calibration},
                      {"date_utc", search->date_utc},
                      {"tool_version", search->tool_version},
                      {"cost_source", search->cost_source},
                      {"cost_unit", search->cost_unit},
                      {"gpu", search->gpu},
                      {"budget_spec", search->budget_spec},
                      {"budget_cost", search->budget_cost}};
    if (search->seq_len > 0) root["search"]["seq_len"] = search->seq_len;
    if (!search->layout.empty()) {
      root["search"]["layout"] = nlohmann::ordered_json::parse(search->layout);
    }
  }
  root["default"] = default_spec.to_string();
  std::set<int64_t> layers;
  for (const auto& [layer, spec] : layer_defaults) layers.insert(layer);
  for (const auto& [layer, heads] : head_specs) layers.insert(layer);
  for (const auto& [layer, scores] : head_scores) layers.insert(layer);
  nlohmann::ordered_json layers_json = nlohmann::ordered_json::object();
  for (int64_t layer : layers) {
    nlohmann::ordered_json layer_json = nlohmann::ordered_json::object();
    if (const auto found = layer_defaults.find(layer); found != layer_defaults.end()) {
      layer_json["default"] = found->second.to_string();
    }
    if (const auto found = head_specs.find(layer); found != head_specs.end()) {
      nlohmann::ordered_json heads_json = nlohmann::ordered_json::object();
      for (const auto& [head, spec] : found->second)
        heads_json[std::to_string(head)] = spec.to_string();
      layer_json["heads"] = heads_json;
    }
    if (const auto found = head_scores.find(layer); found != head_scores.end()) {
      nlohmann::ordered_json scores_json = nlohmann::ordered_json::object();
      for (const auto& [head, score] : found->second) {
        scores_json[std::to_string(head)] = {{"recall", score.recall},
                                             {"output_error", score.output_error},
                                             {"cost", score.cost}};
      }
      layer_json["scores"] = scores_json;
    }
    layers_json[std::to_string(layer)] = layer_json;
  }
  root["layers"] = layers_json;
  return root.dump(2);
}

std::vector<PatternSpec> PatternConfig::layer_specs(int64_t layer, int64_t heads) const {
  if (heads < 1) throw_invalid_argument("heads", ">= 1", std::to_string(heads));
  const auto layer_default = layer_defaults.find(layer);
  std::vector<PatternSpec> specs(
      heads, layer_default == layer_defaults.end() ? default_spec : layer_default->second);
  const auto layer_heads = head_specs.find(layer);
  if (layer_heads == head_specs.end()) return specs;
  for (const auto& [head, spec] : layer_heads->second) {
    if (head < 0 || head >= heads) {
      throw_invalid_argument(
          "pattern config layers." + std::to_string(layer) + ".heads",
          "head indices < " + std::to_string(heads) + " (the model's query heads)",
          std::to_string(head));
    }
    specs[head] = spec;
  }
  return specs;
}

}  // namespace mmsparse
