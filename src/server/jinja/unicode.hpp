// Python's Unicode string behaviour where templates rely on it, through ICU (already the
// tokenizer's): case mappings (str.upper, lower, title, capitalize: full mappings, final sigma
// included), str.isupper / islower, the word characters of re's \w (wordcount), and the line
// boundaries of str.splitlines.
#pragma once

#include <string>
#include <vector>

namespace ssmkit::server::jinja {

std::string PyUpper(const std::string& s);
std::string PyLower(const std::string& s);
std::string PyTitle(const std::string& s);
std::string PyCapitalize(const std::string& s);
// str.isupper() / str.islower(): every cased character is, and there is one.
bool PyIsUpper(const std::string& s);
bool PyIsLower(const std::string& s);
// re's \w on a str: letters, digits and numbers of any script, and '_'.
bool IsWordChar(char32_t c);
// str.splitlines(): \n, \r, \r\n, \v, \f, \x1c-\x1e, \x85, U+2028, U+2029 end a line.
std::vector<std::string> PySplitLines(const std::string& s);

}  // namespace ssmkit::server::jinja
