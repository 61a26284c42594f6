// Pattern specs, per-model pattern configs and modality layouts.

#include <nanobind/nanobind.h>
#include <nanobind/stl/string.h>
#include <nanobind/stl/tuple.h>
#include <nanobind/stl/vector.h>

#include <cstdint>
#include <string>
#include <tuple>
#include <vector>

#include "bindings.h"
#include "mmsparse/layout.h"
#include "mmsparse/patterns.h"
#include "mmsparse/status.h"

namespace nb = nanobind;

namespace mmsparse::python {
namespace {

using GridTuple = std::tuple<int64_t, int64_t, int64_t>;  // (t, h, w) after spatial merging

std::vector<Grid> to_grids(const std::vector<GridTuple>& tuples) {
  std::vector<Grid> grids;
  grids.reserve(tuples.size());
  for (const auto& [t, h, w] : tuples) grids.push_back(Grid{t, h, w});
  return grids;
}

nb::dict segment_dict(const Segment& segment) {
  nb::dict entry;
  entry["type"] = std::string(modality_name(segment.modality));
  entry["begin"] = segment.begin;
  entry["end"] = segment.end;
  entry["media"] = segment.media;
  entry["first_frame"] = segment.first_frame;
  return entry;
}

nb::dict media_dict(const Media& media) {
  nb::dict entry;
  entry["type"] = std::string(modality_name(media.modality));
  entry["grid"] = nb::make_tuple(media.grid.t, media.grid.h, media.grid.w);
  entry["start_marker"] = media.start_marker;
  entry["end_marker"] = media.end_marker;
  return entry;
}

void bind_layout(nb::module_& module) {
  nb::class_<ModalityLayout>(module, "ModalityLayout")
      .def(nb::init<>())
      .def_static("from_json", &ModalityLayout::from_json, nb::arg("json_text"))
      .def_static("text_only", &ModalityLayout::text_only, nb::arg("length"))
      .def_static(
          "from_token_types",
          [](const std::vector<uint8_t>& token_types, const std::vector<GridTuple>& image_grids,
             const std::vector<GridTuple>& video_grids) {
            const std::vector<Grid> images = to_grids(image_grids);
            const std::vector<Grid> videos = to_grids(video_grids);
            return ModalityLayout::from_token_types(token_types, images, videos);
          },
          nb::arg("token_types"), nb::arg("image_grids"), nb::arg("video_grids"))
      .def("to_json", &ModalityLayout::to_json)
      .def_prop_ro("length", &ModalityLayout::length)
      .def("is_mixed", &ModalityLayout::is_mixed)
      .def("video_frame_tokens", &ModalityLayout::video_frame_tokens)
      .def("token_types", &ModalityLayout::token_types)
      .def("token_media", &ModalityLayout::token_media)
      .def("token_frames", &ModalityLayout::token_frames)
      .def("segments",
           [](const ModalityLayout& layout) {
             nb::list segments;
             for (const Segment& segment : layout.segments())
               segments.append(segment_dict(segment));
             return segments;
           })
      .def("media",
           [](const ModalityLayout& layout) {
             nb::list media;
             for (const Media& item : layout.media()) media.append(media_dict(item));
             return media;
           })
      .def("__eq__", [](const ModalityLayout& a, const ModalityLayout& b) { return a == b; });

  nb::class_<LayoutBuilder>(module, "LayoutBuilder")
      .def(nb::init<>())
      .def("text", &LayoutBuilder::text, nb::arg("length"), nb::rv_policy::reference_internal)
      .def(
          "image",
          [](LayoutBuilder& builder, const GridTuple& grid, bool markers) -> LayoutBuilder& {
            return builder.image(to_grids({grid}).front(), markers);
          },
          nb::arg("grid"), nb::arg("markers"), nb::rv_policy::reference_internal)
      .def(
          "video",
          [](LayoutBuilder& builder, const GridTuple& grid, int64_t frame_separator,
             bool markers) -> LayoutBuilder& {
            return builder.video(to_grids({grid}).front(), frame_separator, markers);
          },
          nb::arg("grid"), nb::arg("frame_separator"), nb::arg("markers"),
          nb::rv_policy::reference_internal)
      .def("build", &LayoutBuilder::build);
}

void bind_patterns(nb::module_& module) {
  module.def(
      "parse_spec", [](const std::string& text) { return PatternSpec::parse(text).to_string(); },
      nb::arg("spec"), "The spec in canonical form; raises ValueError naming the bad part");
  module.def(
      "resolve_spec",
      [](const std::string& text, const ModalityLayout* layout) {
        return resolve_pattern(PatternSpec::parse(text), layout).to_string();
      },
      nb::arg("spec"), nb::arg("layout").none() = nb::none());
  module.def(
      "is_dynamic", [](const std::string& text) { return is_dynamic(PatternSpec::parse(text)); },
      nb::arg("spec"));
  module.def("known_patterns", []() {
    nb::list patterns;
    for (const PatternInfo& info : known_patterns()) {
      nb::dict entry;
      entry["name"] = info.name;
      entry["description"] = info.description;
      entry["default_spec"] = info.default_spec;
      entry["dynamic"] = info.dynamic;
      patterns.append(entry);
    }
    return patterns;
  });

  nb::class_<PatternConfig>(module, "PatternConfig")
      .def_static("from_json", &PatternConfig::from_json, nb::arg("json_text"))
      .def("to_json", &PatternConfig::to_json)
      .def(
          "layer_specs",
          [](const PatternConfig& config, int64_t layer, int64_t heads) {
            std::vector<std::string> specs;
            for (const PatternSpec& spec : config.layer_specs(layer, heads)) {
              specs.push_back(spec.to_string());
            }
            return specs;
          },
          nb::arg("layer"), nb::arg("heads"))
      .def_prop_ro("default_spec",
                   [](const PatternConfig& config) { return config.default_spec.to_string(); })
      .def_prop_ro("search_seq_len", [](const PatternConfig& config) -> int64_t {
        return config.search ? config.search->seq_len : 0;
      });
}

}  // namespace

void bind_config(nb::module_& module) {
  bind_layout(module);
  bind_patterns(module);
}

}  // namespace mmsparse::python
