package transport

import (
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"io/fs"
	"os"
)

// BaoTLSConfig is the TLS client configuration for OpenBao: certificates are validated against
// caFile when that file exists, else against the system roots, and serverName (the intercept
// name, bao.cbs.tikali.net) is what the certificate must name whatever address was dialled.
// Verification is never switched off. An empty caFile, or one that does not exist, means the
// system roots (the CA file is optional on the box); an unreadable file or one without a PEM
// certificate is an error naming the file.
func BaoTLSConfig(caFile, serverName string) (*tls.Config, error) {
	return baoTLSConfig(caFile, serverName, os.ReadFile)
}

func baoTLSConfig(caFile, serverName string, readFile func(string) ([]byte, error)) (*tls.Config, error) {
	cfg := &tls.Config{MinVersion: tls.VersionTLS12, ServerName: serverName}
	if caFile == "" {
		return cfg, nil
	}
	data, err := readFile(caFile)
	if errors.Is(err, fs.ErrNotExist) {
		return cfg, nil
	}
	if err != nil {
		return nil, fmt.Errorf("bao: ca_file %s: %w", caFile, err)
	}
	pool := x509.NewCertPool()
	if !pool.AppendCertsFromPEM(data) {
		return nil, fmt.Errorf("bao: ca_file %s holds no PEM certificate", caFile)
	}
	cfg.RootCAs = pool
	return cfg, nil
}
