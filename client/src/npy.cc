#include "normsvc/client/npy.h"

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <limits>
#include <optional>

#include "absl/strings/str_cat.h"

namespace normsvc::client {
namespace {

constexpr std::string_view kMagic = "\x93NUMPY";
constexpr int64_t kMaxDim = int64_t{1} << 62;

struct Header {
  NpyDType dtype = NpyDType::kFloat32;
  std::vector<int64_t> shape;
  int64_t data_bytes = 0;
};

// Cursor over the header's Python dict literal, e.g.
// {'descr': '<f4', 'fortran_order': False, 'shape': (3, 4), }
class DictParser {
 public:
  explicit DictParser(std::string_view text) : text_(text) {}

  void SkipSpace() {
    while (pos_ < text_.size() && (text_[pos_] == ' ' || text_[pos_] == '\n' ||
                                   text_[pos_] == '\t' || text_[pos_] == '\r')) {
      ++pos_;
    }
  }
  bool Consume(char c) {
    SkipSpace();
    if (pos_ < text_.size() && text_[pos_] == c) {
      ++pos_;
      return true;
    }
    return false;
  }
  bool ConsumeWord(std::string_view word) {
    SkipSpace();
    if (text_.substr(pos_, word.size()) != word) return false;
    pos_ += word.size();
    return true;
  }
  std::optional<std::string_view> String() {
    SkipSpace();
    if (pos_ >= text_.size() || (text_[pos_] != '\'' && text_[pos_] != '"')) return std::nullopt;
    const char quote = text_[pos_++];
    const size_t end = text_.find(quote, pos_);
    if (end == std::string_view::npos) return std::nullopt;
    std::string_view value = text_.substr(pos_, end - pos_);
    pos_ = end + 1;
    return value;
  }
  std::optional<int64_t> Integer() {
    SkipSpace();
    int64_t value = 0;
    const size_t start = pos_;
    while (pos_ < text_.size() && text_[pos_] >= '0' && text_[pos_] <= '9') {
      const int digit = text_[pos_] - '0';
      // Checked before multiplying: value * 10 + digit would overflow int64
      // long before a dimension the file could hold.
      if (value > (kMaxDim - digit) / 10) return std::nullopt;
      value = value * 10 + digit;
      ++pos_;
    }
    if (pos_ == start) return std::nullopt;
    return value;
  }
  bool AtEndExceptSpace() {
    SkipSpace();
    return pos_ == text_.size();
  }

 private:
  std::string_view text_;
  size_t pos_ = 0;
};

absl::StatusOr<NpyDType> ParseDescr(std::string_view descr) {
  if (descr == "<f4") return NpyDType::kFloat32;
  if (descr == "<f2") return NpyDType::kFloat16;
  if (descr == "<f8") return NpyDType::kFloat64;
  if (descr == "<u2" || descr == "<V2" || descr == "|V2") return NpyDType::kBFloat16;
  return absl::InvalidArgumentError(absl::StrCat(
      "unsupported .npy dtype '", std::string(descr),
      "' (supported: '<f4' float32, '<f2' float16, '<f8' float64, '<u2' or '|V2' bfloat16 bits)"));
}

absl::StatusOr<Header> ParseHeaderDict(std::string_view text, const NpyReadOptions& options) {
  DictParser parser(text);
  if (!parser.Consume('{')) return absl::InvalidArgumentError(".npy header is not a dict");
  std::optional<NpyDType> dtype;
  std::optional<bool> fortran_order;
  std::optional<std::vector<int64_t>> shape;
  while (!parser.Consume('}')) {
    std::optional<std::string_view> key = parser.String();
    if (!key || !parser.Consume(':')) return absl::InvalidArgumentError("malformed .npy header");
    if (*key == "descr") {
      std::optional<std::string_view> descr = parser.String();
      if (!descr) return absl::InvalidArgumentError(".npy descr is not a string");
      absl::StatusOr<NpyDType> parsed = ParseDescr(*descr);
      if (!parsed.ok()) return parsed.status();
      dtype = *parsed;
    } else if (*key == "fortran_order") {
      if (parser.ConsumeWord("True")) {
        fortran_order = true;
      } else if (parser.ConsumeWord("False")) {
        fortran_order = false;
      } else {
        return absl::InvalidArgumentError(".npy fortran_order is not True or False");
      }
    } else if (*key == "shape") {
      if (!parser.Consume('(')) return absl::InvalidArgumentError(".npy shape is not a tuple");
      shape.emplace();
      while (!parser.Consume(')')) {
        std::optional<int64_t> dim = parser.Integer();
        if (!dim) return absl::InvalidArgumentError(".npy shape has a bad dimension");
        if (static_cast<int>(shape->size()) >= options.max_dims) {
          return absl::InvalidArgumentError(".npy shape has too many dimensions");
        }
        shape->push_back(*dim);
        if (!parser.Consume(',')) {
          if (!parser.Consume(')')) return absl::InvalidArgumentError("malformed .npy shape");
          break;
        }
      }
    } else {
      return absl::InvalidArgumentError(
          absl::StrCat("unknown .npy header key '", std::string(*key), "'"));
    }
    if (!parser.Consume(',')) {
      if (!parser.Consume('}')) return absl::InvalidArgumentError("malformed .npy header");
      break;
    }
  }
  if (!parser.AtEndExceptSpace())
    return absl::InvalidArgumentError("trailing bytes in .npy header");
  if (!dtype || !fortran_order || !shape) {
    return absl::InvalidArgumentError(".npy header lacks descr, fortran_order or shape");
  }
  if (*fortran_order && shape->size() > 1) {
    return absl::InvalidArgumentError(
        "Fortran-order .npy arrays are not supported (save np.ascontiguousarray(a))");
  }
  Header header;
  header.dtype = *dtype;
  header.shape = *std::move(shape);
  int64_t count = 1;
  for (int64_t dim : header.shape) {
    if (dim != 0 && count > std::numeric_limits<int64_t>::max() / 8 / dim) {
      return absl::InvalidArgumentError(".npy shape product overflows");
    }
    count *= dim;
  }
  header.data_bytes = count * NpyDTypeSize(header.dtype);
  if (header.data_bytes > options.max_data_bytes) {
    return absl::InvalidArgumentError(absl::StrCat(".npy array has ", header.data_bytes,
                                                   " bytes, more than the limit of ",
                                                   options.max_data_bytes));
  }
  return header;
}

// Reads the preamble (magic, version, header length) from `prefix`, which
// holds at least the first 12 bytes when available. Returns the total
// length of preamble plus header.
absl::StatusOr<int64_t> ParsePreamble(std::string_view prefix, const NpyReadOptions& options,
                                      int64_t* preamble_bytes) {
  if (prefix.size() < 10 || prefix.substr(0, kMagic.size()) != kMagic) {
    return absl::InvalidArgumentError("not a .npy file (bad magic)");
  }
  const uint8_t major = static_cast<uint8_t>(prefix[6]);
  int64_t header_len = 0;
  if (major == 1) {
    *preamble_bytes = 10;
    header_len = static_cast<uint8_t>(prefix[8]) | (static_cast<uint8_t>(prefix[9]) << 8);
  } else if (major == 2 || major == 3) {
    if (prefix.size() < 12) return absl::InvalidArgumentError("truncated .npy preamble");
    *preamble_bytes = 12;
    for (int i = 3; i >= 0; --i)
      header_len = (header_len << 8) | static_cast<uint8_t>(prefix[8 + i]);
  } else {
    return absl::InvalidArgumentError(absl::StrCat("unsupported .npy format version ", major));
  }
  if (header_len > options.max_header_bytes) {
    return absl::InvalidArgumentError(
        absl::StrCat(".npy header of ", header_len, " bytes is too long"));
  }
  return *preamble_bytes + header_len;
}

absl::Status CheckDataSize(const Header& header, int64_t available) {
  if (available != header.data_bytes) {
    return absl::InvalidArgumentError(absl::StrCat(
        ".npy data section has ", available, " bytes; the header describes ", header.data_bytes));
  }
  return absl::OkStatus();
}

}  // namespace

int64_t NpyDTypeSize(NpyDType dtype) {
  switch (dtype) {
    case NpyDType::kFloat32:
      return 4;
    case NpyDType::kFloat64:
      return 8;
    default:
      return 2;
  }
}

std::string_view NpyDTypeName(NpyDType dtype) {
  switch (dtype) {
    case NpyDType::kFloat32:
      return "float32";
    case NpyDType::kFloat16:
      return "float16";
    case NpyDType::kBFloat16:
      return "bfloat16 (as uint16)";
    case NpyDType::kFloat64:
      return "float64";
  }
  return "?";
}

absl::StatusOr<NpyArray> ParseNpy(std::string_view bytes, const NpyReadOptions& options) {
  int64_t preamble = 0;
  absl::StatusOr<int64_t> header_end = ParsePreamble(bytes, options, &preamble);
  if (!header_end.ok()) return header_end.status();
  if (*header_end > static_cast<int64_t>(bytes.size())) {
    return absl::InvalidArgumentError("truncated .npy header");
  }
  absl::StatusOr<Header> header =
      ParseHeaderDict(bytes.substr(preamble, *header_end - preamble), options);
  if (!header.ok()) return header.status();
  const std::string_view data = bytes.substr(*header_end);
  if (absl::Status status = CheckDataSize(*header, static_cast<int64_t>(data.size()));
      !status.ok()) {
    return status;
  }
  NpyArray array;
  array.dtype = header->dtype;
  array.shape = std::move(header->shape);
  array.data.assign(data.data(), data.size());
  return array;
}

absl::StatusOr<NpyArray> ReadNpyFile(const std::string& path, const NpyReadOptions& options) {
  std::error_code error;
  if (!std::filesystem::is_regular_file(path, error)) {
    return absl::NotFoundError(absl::StrCat("'", path, "' is not a readable file"));
  }
  std::ifstream in(path, std::ios::binary | std::ios::ate);
  if (!in) return absl::NotFoundError(absl::StrCat("cannot open '", path, "'"));
  const int64_t file_size = static_cast<int64_t>(in.tellg());
  if (file_size < 0) return absl::DataLossError(absl::StrCat("cannot size '", path, "'"));
  in.seekg(0);
  std::string prefix(static_cast<size_t>(std::min<int64_t>(file_size, 12)), '\0');
  in.read(prefix.data(), static_cast<std::streamsize>(prefix.size()));
  int64_t preamble = 0;
  absl::StatusOr<int64_t> header_end = ParsePreamble(prefix, options, &preamble);
  if (!header_end.ok()) {
    return absl::InvalidArgumentError(absl::StrCat(path, ": ", header_end.status().message()));
  }
  if (*header_end > file_size) return absl::InvalidArgumentError(path + ": truncated .npy header");
  std::string header_text(static_cast<size_t>(*header_end - preamble), '\0');
  in.seekg(preamble);
  in.read(header_text.data(), static_cast<std::streamsize>(header_text.size()));
  absl::StatusOr<Header> header = ParseHeaderDict(header_text, options);
  if (!header.ok()) {
    return absl::InvalidArgumentError(absl::StrCat(path, ": ", header.status().message()));
  }
  if (absl::Status status = CheckDataSize(*header, file_size - *header_end); !status.ok()) {
    return absl::InvalidArgumentError(absl::StrCat(path, ": ", status.message()));
  }
  NpyArray array;
  array.dtype = header->dtype;
  array.shape = std::move(header->shape);
  array.data.resize(static_cast<size_t>(header->data_bytes));
  in.read(array.data.data(), static_cast<std::streamsize>(array.data.size()));
  if (!in) return absl::DataLossError(absl::StrCat(path, ": short read"));
  return array;
}

absl::StatusOr<std::string> SerializeNpy(const NpyArray& array) {
  int64_t count = 1;
  for (int64_t dim : array.shape) {
    if (dim < 0) return absl::InvalidArgumentError("negative dimension");
    count *= dim;
  }
  if (static_cast<uint64_t>(count * NpyDTypeSize(array.dtype)) != array.data.size()) {
    return absl::InvalidArgumentError("array data size does not match its shape");
  }
  std::string_view descr = "<f4";
  if (array.dtype == NpyDType::kFloat16) descr = "<f2";
  if (array.dtype == NpyDType::kFloat64) descr = "<f8";
  if (array.dtype == NpyDType::kBFloat16) descr = "<u2";
  // Python tuple syntax: "()", "(3,)", "(3, 4)".
  std::string shape = "(";
  for (size_t i = 0; i < array.shape.size(); ++i) {
    absl::StrAppend(&shape, i == 0 ? "" : ", ", array.shape[i]);
  }
  shape += array.shape.size() == 1 ? ",)" : ")";
  std::string header = absl::StrCat("{'descr': '", std::string(descr),
                                    "', 'fortran_order': False, 'shape': ", shape, ", }");
  // Pad with spaces so that preamble + header + '\n' is a multiple of 64.
  const bool version2 = header.size() + 11 > 65535;
  const size_t preamble = version2 ? 12 : 10;
  const size_t total = (preamble + header.size() + 1 + 63) / 64 * 64;
  header.append(total - preamble - header.size() - 1, ' ');
  header += '\n';
  std::string out(kMagic);
  out += static_cast<char>(version2 ? 2 : 1);
  out += '\0';
  const size_t len = header.size();
  out += static_cast<char>(len & 0xff);
  out += static_cast<char>((len >> 8) & 0xff);
  if (version2) {
    out += static_cast<char>((len >> 16) & 0xff);
    out += static_cast<char>((len >> 24) & 0xff);
  }
  out += header;
  out += array.data;
  return out;
}

absl::Status WriteNpyFile(const std::string& path, const NpyArray& array) {
  absl::StatusOr<std::string> bytes = SerializeNpy(array);
  if (!bytes.ok()) return bytes.status();
  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  if (!out) return absl::PermissionDeniedError(absl::StrCat("cannot write '", path, "'"));
  out.write(bytes->data(), static_cast<std::streamsize>(bytes->size()));
  out.close();
  if (!out) return absl::DataLossError(absl::StrCat("error writing '", path, "'"));
  return absl::OkStatus();
}

}  // namespace normsvc::client
