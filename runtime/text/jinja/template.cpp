// Template: a parsed Program and its render entry point.
#include "runtime/text/jinja/template.h"

namespace offgen::jinja {

Template::Template(std::string_view source, const ParseLimits& limits)
    : program_(parse(source, limits)) {}

MarkedText Template::render(const Dict& vars, const std::tm& now,
                            const RenderLimits& limits) const {
  auto globals = std::make_shared<Scope>(nullptr);
  for (const auto& [k, v] : vars.items()) globals->set(to_str(k).text(), v);
  Interp in(limits, now);
  return in.render(*program_, std::move(globals));
}

}  // namespace offgen::jinja
