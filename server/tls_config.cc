#include "server/tls_config.h"

#include <openssl/bio.h>
#include <openssl/err.h>
#include <openssl/evp.h>
#include <openssl/pem.h>
#include <openssl/x509.h>

#include <vector>

#include <grpcpp/security/server_credentials.h>

#include "absl/strings/str_cat.h"
#include "server/log.h"
#include "server/options.h"
#include "server/secret_file.h"

namespace normsvc::server {
namespace {

struct X509Free {
  void operator()(X509* x) const { X509_free(x); }
};
struct KeyFree {
  void operator()(EVP_PKEY* k) const { EVP_PKEY_free(k); }
};
struct BioFree {
  void operator()(BIO* b) const { BIO_free(b); }
};
using X509Ptr = std::unique_ptr<X509, X509Free>;
using KeyPtr = std::unique_ptr<EVP_PKEY, KeyFree>;
using BioPtr = std::unique_ptr<BIO, BioFree>;

// Never prompt on the terminal for a passphrase: an encrypted key fails.
int NoPassphrase(char*, int, int, void*) { return -1; }

BioPtr MemoryBio(const std::string& pem) {
  return BioPtr(BIO_new_mem_buf(pem.data(), static_cast<int>(pem.size())));
}

// Every certificate in `pem`, in order.
std::vector<X509Ptr> ReadCertificates(const std::string& pem) {
  std::vector<X509Ptr> certificates;
  BioPtr bio = MemoryBio(pem);
  while (bio != nullptr) {
    X509Ptr certificate(PEM_read_bio_X509(bio.get(), nullptr, NoPassphrase, nullptr));
    if (certificate == nullptr) break;
    certificates.push_back(std::move(certificate));
  }
  return certificates;
}

absl::Status FileError(const char* flag, const std::string& path, const std::string& what) {
  return absl::FailedPreconditionError(absl::StrCat("--", flag, ": '", path, "' ", what));
}

// A server certificate past its validity still starts the server (clients
// decide), but it is worth a line in the log.
void WarnIfOutsideValidity(X509* certificate, const std::string& path) {
  if (X509_cmp_current_time(X509_get0_notAfter(certificate)) < 0) {
    Log(LogLevel::kWarning, "--tls_cert_file: the certificate in '", path,
        "' has expired; clients will refuse it");
  } else if (X509_cmp_current_time(X509_get0_notBefore(certificate)) > 0) {
    Log(LogLevel::kWarning, "--tls_cert_file: the certificate in '", path,
        "' is not valid yet; clients will refuse it");
  }
}

// Reads and checks the three files; fills `ssl`.
absl::Status LoadTlsFiles(const ServerOptions& o, grpc::SslServerCredentialsOptions* ssl) {
  absl::StatusOr<std::string> cert_pem = ReadFlagFile("tls_cert_file", o.tls_cert_file);
  if (!cert_pem.ok()) return cert_pem.status();
  absl::StatusOr<std::string> key_pem = ReadFlagFile("tls_key_file", o.tls_key_file);
  if (!key_pem.ok()) return key_pem.status();

  std::vector<X509Ptr> chain = ReadCertificates(*cert_pem);
  if (chain.empty()) {
    return FileError("tls_cert_file", o.tls_cert_file, "holds no PEM certificate");
  }
  BioPtr key_bio = MemoryBio(*key_pem);
  KeyPtr key(PEM_read_bio_PrivateKey(key_bio.get(), nullptr, NoPassphrase, nullptr));
  if (key == nullptr) {
    return FileError("tls_key_file", o.tls_key_file,
                     "holds no PEM private key (an encrypted key is not supported)");
  }
  if (X509_check_private_key(chain.front().get(), key.get()) != 1) {
    return FileError(
        "tls_key_file", o.tls_key_file,
        absl::StrCat("does not match the certificate in --tls_cert_file '", o.tls_cert_file, "'"));
  }
  WarnIfOutsideValidity(chain.front().get(), o.tls_cert_file);
  ssl->pem_key_cert_pairs.push_back({*std::move(key_pem), *std::move(cert_pem)});

  if (!o.tls_client_ca_file.empty()) {
    absl::StatusOr<std::string> ca_pem = ReadFlagFile("tls_client_ca_file", o.tls_client_ca_file);
    if (!ca_pem.ok()) return ca_pem.status();
    if (ReadCertificates(*ca_pem).empty()) {
      return FileError("tls_client_ca_file", o.tls_client_ca_file, "holds no PEM certificate");
    }
    ssl->pem_root_certs = *std::move(ca_pem);
    ssl->client_certificate_request = GRPC_SSL_REQUEST_AND_REQUIRE_CLIENT_CERTIFICATE_AND_VERIFY;
  } else {
    ssl->client_certificate_request = GRPC_SSL_DONT_REQUEST_CLIENT_CERTIFICATE;
  }
  return absl::OkStatus();
}

}  // namespace

const char* TransportSecurityName(TransportSecurity security) {
  switch (security) {
    case TransportSecurity::kPlaintext:
      return "plaintext";
    case TransportSecurity::kTls:
      return "TLS";
    case TransportSecurity::kMutualTls:
      return "mutual TLS";
  }
  return "plaintext";
}

TransportSecurity RequestedTransportSecurity(const ServerOptions& options) {
  if (options.tls_cert_file.empty()) return TransportSecurity::kPlaintext;
  return options.tls_client_ca_file.empty() ? TransportSecurity::kTls
                                            : TransportSecurity::kMutualTls;
}

absl::StatusOr<std::shared_ptr<grpc::ServerCredentials>> MakeServerCredentials(
    const ServerOptions& options) {
  if (RequestedTransportSecurity(options) == TransportSecurity::kPlaintext) {
    return grpc::InsecureServerCredentials();
  }
  grpc::SslServerCredentialsOptions ssl;
  const absl::Status status = LoadTlsFiles(options, &ssl);
  // OpenSSL keeps failures in a per-thread queue; leave it empty for gRPC,
  // which uses OpenSSL on this thread next.
  ERR_clear_error();
  if (!status.ok()) return status;
  return grpc::SslServerCredentials(ssl);
}

}  // namespace normsvc::server
