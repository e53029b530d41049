// Compiling a translated Oniguruma pattern with PCRE2 and iterating its matches the way the `onig`
// crate's find_iter does (data/onig_regex.h).
// Reference: rust-onig onig/src/find.rs (FindMatches::next: "Don't accept empty matches
// immediately following the last match"); tokenizers tokenizers/src/utils/onig.rs (SysRegex);
// PCRE2 pcre2api(3), pcre2jit(3).
#define PCRE2_CODE_UNIT_WIDTH 8
#include <pcre2.h>

#include <optional>

#include "data/onig_regex.h"
#include "data/utf8.h"

namespace strata::data::hf {

namespace {

// One match block, match context and JIT stack per thread, shared by every pattern it runs.
struct MatchState {
  pcre2_match_data* data = pcre2_match_data_create(64, nullptr);
  pcre2_match_context* context = pcre2_match_context_create(nullptr);
  pcre2_jit_stack* stack = pcre2_jit_stack_create(32 * 1024, 8 * 1024 * 1024, nullptr);
  MatchState() { pcre2_jit_stack_assign(context, nullptr, stack); }
  ~MatchState() {
    pcre2_jit_stack_free(stack);
    pcre2_match_context_free(context);
    pcre2_match_data_free(data);
  }
};

std::string pcre2_message(int code) {
  PCRE2_UCHAR message[256];
  pcre2_get_error_message(code, message, sizeof message);
  return reinterpret_cast<char*>(message);
}

}  // namespace

OnigRegex::OnigRegex(std::string_view pattern) {
  OnigTranslation t = onig_to_pcre2(pattern);
  if (!t.error.empty()) {
    error_ = t.error;
    return;
  }
  pcre2_ = std::move(t.pcre2);
  pcre2_compile_context* context = pcre2_compile_context_create(nullptr);
  pcre2_set_newline(context, PCRE2_NEWLINE_LF);  // Oniguruma's only newline
  pcre2_set_bsr(context, PCRE2_BSR_UNICODE);     // \R: CR LF, LF, VT, FF, CR, NEL, LS, PS
  int code = 0;
  PCRE2_SIZE offset = 0;
  code_ = pcre2_compile(reinterpret_cast<PCRE2_SPTR>(pcre2_.data()), pcre2_.size(),
                        PCRE2_UTF | PCRE2_UCP | PCRE2_NEVER_BACKSLASH_C, &code, &offset, context);
  pcre2_compile_context_free(context);
  if (!code_) {
    error_ = "PCRE2 does not compile its translation \"" + pcre2_ + "\" at byte " + std::to_string(offset) + ": " +
             pcre2_message(code);
    return;
  }
  pcre2_jit_compile(static_cast<pcre2_code*>(code_), PCRE2_JIT_COMPLETE);  // the interpreter where JIT is unavailable
}

OnigRegex::~OnigRegex() {
  if (code_) pcre2_code_free(static_cast<pcre2_code*>(code_));
}

int OnigRegex::find_all(std::string_view text, std::vector<ByteRange>& out) const {
  thread_local MatchState state;
  const auto* subject = reinterpret_cast<PCRE2_SPTR>(text.data());
  size_t start = 0;                          // FindMatches::last_end
  std::optional<size_t> last_match_end;      // FindMatches::last_match_end
  while (start <= text.size()) {
    const int rc = pcre2_match(static_cast<pcre2_code*>(code_), subject, text.size(), start, PCRE2_NO_UTF_CHECK,
                               state.data, state.context);
    if (rc == PCRE2_ERROR_NOMATCH) return 0;
    if (rc < 0) return rc;
    const PCRE2_SIZE* ov = pcre2_get_ovector_pointer(state.data);
    if (ov[0] == ov[1] && last_match_end == ov[1]) {  // an empty match right after the last: one character on
      size_t len = 1;
      if (start < text.size()) decode_utf8(text, start, len);
      start += len;
      continue;
    }
    out.emplace_back(ov[0], ov[1]);
    start = ov[1];
    last_match_end = ov[1];
  }
  return 0;
}

std::string OnigRegex::match_error_message(int code) { return "PCRE2 error " + std::to_string(code) + ": " + pcre2_message(code); }

}  // namespace strata::data::hf
