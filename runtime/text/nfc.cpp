// NFC / NFKC through ICU's C API: UTF-8 -> UTF-16, quick check, normalise, back to UTF-8.
#include "runtime/text/nfc.h"

#include <unicode/unorm2.h>
#include <unicode/ustring.h>

#include <vector>

#include "runtime/core/error.h"

namespace offgen {

namespace {

bool normalize(bool compat, std::string_view text, std::string& out) {
  if (text.empty()) return false;
  bool ascii = true;
  for (unsigned char ch : text) ascii = ascii && ch < 0x80;
  if (ascii) return false;  // ASCII is always in NFC and NFKC
  UErrorCode err = U_ZERO_ERROR;
  const UNormalizer2* nfc = compat ? unorm2_getNFKCInstance(&err) : unorm2_getNFCInstance(&err);
  OFFGEN_CHECK(U_SUCCESS(err), kInternal, "ICU: {} normaliser unavailable ({})",
               compat ? "NFKC" : "NFC", u_errorName(err));
  // UTF-8 -> UTF-16 without substitution: invalid input fails and is left raw.
  int32_t n16 = 0;
  u_strFromUTF8(nullptr, 0, &n16, text.data(), static_cast<int32_t>(text.size()), &err);
  if (err != U_BUFFER_OVERFLOW_ERROR && U_FAILURE(err)) return false;
  err = U_ZERO_ERROR;
  std::vector<UChar> u16(n16 + 1);
  u_strFromUTF8(u16.data(), n16 + 1, nullptr, text.data(), static_cast<int32_t>(text.size()), &err);
  if (U_FAILURE(err)) return false;
  if (unorm2_isNormalized(nfc, u16.data(), n16, &err) && U_SUCCESS(err)) return false;
  err = U_ZERO_ERROR;
  const int32_t cap = unorm2_normalize(nfc, u16.data(), n16, nullptr, 0, &err);
  err = U_ZERO_ERROR;
  std::vector<UChar> norm(cap + 1);
  unorm2_normalize(nfc, u16.data(), n16, norm.data(), cap + 1, &err);
  OFFGEN_CHECK(U_SUCCESS(err), kInternal, "ICU: {} normalisation failed ({})",
               compat ? "NFKC" : "NFC", u_errorName(err));
  int32_t n8 = 0;
  err = U_ZERO_ERROR;
  u_strToUTF8(nullptr, 0, &n8, norm.data(), cap, &err);
  err = U_ZERO_ERROR;
  out.assign(static_cast<size_t>(n8), '\0');
  u_strToUTF8(out.data(), n8, nullptr, norm.data(), cap, &err);
  OFFGEN_CHECK(U_SUCCESS(err) || err == U_STRING_NOT_TERMINATED_WARNING, kInternal,
               "ICU: UTF-16 -> UTF-8 failed ({})", u_errorName(err));
  return true;
}

}  // namespace

bool nfc_normalize(std::string_view text, std::string& out) { return normalize(false, text, out); }
bool nfkc_normalize(std::string_view text, std::string& out) { return normalize(true, text, out); }

}  // namespace offgen
