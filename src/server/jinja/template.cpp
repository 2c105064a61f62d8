#include "server/jinja/template.hpp"

#include "server/jinja/evaluator.hpp"
#include "server/jinja/lexer.hpp"
#include "server/jinja/parser.hpp"

namespace ssmkit::server::jinja {

Template::Template() = default;
Template::~Template() = default;
Template::Template(Template&&) noexcept = default;
Template& Template::operator=(Template&&) noexcept = default;

Status Template::Parse(const std::string& source, Template* out) {
  std::vector<Token> tokens;
  SSMKIT_RETURN_IF_ERROR(Lex(source, &tokens));
  std::shared_ptr<const Node> root;
  SSMKIT_RETURN_IF_ERROR(ParseTemplate(tokens, &root));
  out->root_ = std::move(root);
  return Status::Ok();
}

Status Template::Render(const Value& context, std::string* out) const {
  out->clear();
  if (!root_) return Status::InvalidArgument("render: the template was not parsed");
  Evaluator evaluator(context, out);
  const Status s = evaluator.Run(*root_);
  if (!s.ok()) out->clear();
  return s;
}

}  // namespace ssmkit::server::jinja
