#include "test_certificates.h"

#include <fstream>
#include <vector>

namespace normsvc::testing {
namespace {

// Extensions of each certificate; the distinguished names come from -subj.
constexpr char kConfig[] = R"([req]
distinguished_name = dn
prompt = no
[dn]
CN = unused
[ca]
basicConstraints = critical, CA:TRUE
keyUsage = critical, keyCertSign, cRLSign
subjectKeyIdentifier = hash
[server]
basicConstraints = critical, CA:FALSE
keyUsage = critical, digitalSignature, keyEncipherment
extendedKeyUsage = serverAuth
subjectAltName = IP:127.0.0.1, DNS:localhost
[client]
basicConstraints = critical, CA:FALSE
keyUsage = critical, digitalSignature, keyEncipherment
extendedKeyUsage = clientAuth
)";

class Openssl {
 public:
  Openssl(std::string config, std::string* error) : config_(std::move(config)), error_(error) {}

  bool Run(const std::vector<std::string>& args) {
    std::vector<std::string> command = {OpensslProgram()};
    command.insert(command.end(), args.begin(), args.end());
    const CommandResult result = RunCommand(command, std::chrono::seconds(60));
    if (result.exit_code == 0) return true;
    *error_ = "openssl " + args[0] + " failed (exit " + std::to_string(result.exit_code) +
              "): " + result.out + result.err;
    return false;
  }
  bool MakeCa(const std::string& name, const std::string& cert, const std::string& key) {
    return Run({"req",
                "-x509",
                "-new",
                "-newkey",
                "ec",
                "-pkeyopt",
                "ec_paramgen_curve:P-256",
                "-nodes",
                "-keyout",
                key,
                "-out",
                cert,
                "-days",
                "2",
                "-config",
                config_,
                "-extensions",
                "ca",
                "-subj",
                "/CN=" + name});
  }
  bool MakeSigned(const std::string& name, const std::string& extensions,
                  const std::string& ca_cert, const std::string& ca_key, const std::string& cert,
                  const std::string& key, int serial) {
    const std::string request = cert + ".csr";
    return Run({"req", "-new", "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:P-256", "-nodes",
                "-keyout", key, "-out", request, "-config", config_, "-subj", "/CN=" + name}) &&
           Run({"x509", "-req", "-in", request, "-CA", ca_cert, "-CAkey", ca_key, "-set_serial",
                std::to_string(serial), "-days", "2", "-extfile", config_, "-extensions",
                extensions, "-out", cert});
  }

 private:
  std::string config_;
  std::string* error_;
};

}  // namespace

std::string OpensslProgram() { return NORMSVC_OPENSSL_PROGRAM; }

bool MakeTestPki(const std::string& dir, TestPki* pki, std::string* error) {
  if (OpensslProgram().empty()) {
    *error = "the openssl program was not found (deploy/setup.sh --test installs it)";
    return false;
  }
  const std::string config = dir + "/pki.cnf";
  std::ofstream(config) << kConfig;
  auto path = [&](const char* name) { return dir + "/" + name; };
  pki->ca_cert = path("ca.pem");
  pki->server_cert = path("server.pem");
  pki->server_key = path("server.key");
  pki->client_cert = path("client.pem");
  pki->client_key = path("client.key");
  pki->other_ca_cert = path("other_ca.pem");
  pki->other_client_cert = path("other_client.pem");
  pki->other_client_key = path("other_client.key");
  const std::string ca_key = path("ca.key"), other_ca_key = path("other_ca.key");
  Openssl openssl(config, error);
  return openssl.MakeCa("normsvc test CA", pki->ca_cert, ca_key) &&
         openssl.MakeSigned("localhost", "server", pki->ca_cert, ca_key, pki->server_cert,
                            pki->server_key, 2) &&
         openssl.MakeSigned("normsvc test client", "client", pki->ca_cert, ca_key, pki->client_cert,
                            pki->client_key, 3) &&
         openssl.MakeCa("unrelated test CA", pki->other_ca_cert, other_ca_key) &&
         openssl.MakeSigned("unrelated client", "client", pki->other_ca_cert, other_ca_key,
                            pki->other_client_cert, pki->other_client_key, 4);
}

}  // namespace normsvc::testing
