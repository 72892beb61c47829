// Certificates for the TLS tests, made at run time by the openssl
// command-line tool (deploy/packages-test.txt) in a temporary directory: a
// CA, a server certificate for 127.0.0.1 and localhost, a client
// certificate from the same CA, and a second, unrelated CA with a client
// certificate of its own. EC P-256 keys, valid for two days from now.
#pragma once

#include <string>

#include "../client/test_process.h"

namespace normsvc::testing {

// Paths of the PEM files.
struct TestPki {
  std::string ca_cert;
  std::string server_cert, server_key;  // signed by ca_cert
  std::string client_cert, client_key;  // signed by ca_cert
  std::string other_ca_cert;
  std::string other_client_cert, other_client_key;  // signed by other_ca_cert
};

// Makes the files under `dir`. On failure returns false with the openssl
// output in `error`.
bool MakeTestPki(const std::string& dir, TestPki* pki, std::string* error);

// The openssl program the tests run (found by CMake; empty when missing).
std::string OpensslProgram();

}  // namespace normsvc::testing
