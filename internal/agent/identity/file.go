// Package identity keeps the box's ziti identity alive: it reads the identity file's client
// certificate and CA (their horizons, for the check-in, status, doctor and the textfile), decides
// who may renew the certificate, and renews it through the controller's certificate extension
// in steps a kill at any point cannot turn into a box that no longer authenticates (renew.go).
package identity

import (
	"bytes"
	"crypto"
	"crypto/x509"
	"encoding/json"
	"encoding/pem"
	"errors"
	"fmt"
	"net/url"
	"path/filepath"
	"reflect"
	"slices"
	"strings"

	"scm.tikali.ai/tikali/applications/monky/monky-deployd/internal/shared/capread"
	"scm.tikali.ai/tikali/applications/monky/monky-deployd/internal/shared/horizon"
)

// maxFile bounds what is read: an identity file is a few kilobytes.
const maxFile = 1 << 20

// ReadFile reads an identity file or a file it references: only a regular file (capread.File:
// a FIFO in its place cannot hang a tick) of at most 1 MiB. It is the default of every reader
// of this package and of the transport's identity check.
func ReadFile(path string) ([]byte, error) {
	return capread.File(path, maxFile, nil)
}

// File is a ziti identity file as the agent reads and renews it. Every field of the file is kept
// on a rewrite, so what newer SDKs add survives a renewal.
type File struct {
	// Controllers are the controller URLs (ztAPIs, else ztAPI), https, in file order.
	Controllers []string
	// CertPEM, KeyPEM and CAPEM are id.cert, id.key and id.ca resolved to PEM (CAPEM nil: none).
	CertPEM, KeyPEM, CAPEM []byte
	// Cert is id.cert's chain (leaf first); CA is id.ca's bundle (nil: none).
	Cert, CA horizon.Bundle
	// Key is id.key; nil when it is held by an engine (pkcs11:, parsec:) the agent cannot read.
	Key crypto.Signer
	// Inline: id.cert and id.key are written in the file (pem: or bare PEM), which is all a
	// renewal rewrites; a file reference would leave its file behind.
	Inline bool

	top map[string]json.RawMessage
	id  map[string]json.RawMessage
}

// Parse reads an identity file; readFile resolves file references (nil: ReadFile). Every
// fault is an error naming the field; nothing here panics on any input.
func Parse(raw []byte, readFile func(string) ([]byte, error)) (*File, error) {
	if readFile == nil {
		readFile = ReadFile
	}
	if len(raw) > maxFile {
		return nil, fmt.Errorf("larger than %d bytes", maxFile)
	}
	f := &File{}
	if err := json.Unmarshal(raw, &f.top); err != nil || f.top == nil {
		return nil, errors.New("not a ziti identity: not a JSON object")
	}
	var single string
	if v, ok := f.top["ztAPI"]; ok && !isNull(v) {
		if err := json.Unmarshal(v, &single); err != nil {
			return nil, errors.New("ztAPI: not a string")
		}
	}
	var many []string
	if v, ok := f.top["ztAPIs"]; ok && !isNull(v) {
		if err := json.Unmarshal(v, &many); err != nil {
			return nil, errors.New("ztAPIs: not a list of strings")
		}
	}
	if len(many) == 0 && single != "" {
		many = []string{single}
	}
	if len(many) == 0 {
		return nil, errors.New("no controller URL (ztAPI and ztAPIs are empty)")
	}
	for _, s := range many {
		u, err := url.Parse(s)
		if err != nil || u.Scheme != "https" || u.Host == "" {
			return nil, fmt.Errorf("controller URL %q is not an https URL", s)
		}
	}
	f.Controllers = many
	if err := json.Unmarshal(f.top["id"], &f.id); err != nil || f.id == nil {
		return nil, errors.New(`id: missing, or not an object`)
	}
	str := func(key string) (string, error) {
		var s string
		if v, ok := f.id[key]; ok && !isNull(v) {
			if err := json.Unmarshal(v, &s); err != nil {
				return "", fmt.Errorf("id.%s: not a string", key)
			}
		}
		return s, nil
	}

	certVal, err := str("cert")
	if err != nil {
		return nil, err
	}
	if certVal == "" {
		return nil, errors.New("id.cert: empty")
	}
	var skip bool
	if f.CertPEM, skip, err = Material(certVal, readFile); err != nil {
		return nil, fmt.Errorf("id.cert: %w", err)
	} else if skip {
		return nil, errors.New("id.cert: only pem: and file: certificates can be read")
	}
	if f.Cert, err = horizon.ParsePEM(f.CertPEM); err != nil {
		return nil, fmt.Errorf("id.cert: %w", err)
	}

	keyVal, err := str("key")
	if err != nil {
		return nil, err
	}
	if keyVal == "" {
		return nil, errors.New("id.key: empty")
	}
	if f.KeyPEM, skip, err = Material(keyVal, readFile); err != nil {
		return nil, fmt.Errorf("id.key: %w", err)
	}
	if !skip {
		k, err := ParseKey(f.KeyPEM)
		if err != nil {
			return nil, fmt.Errorf("id.key: %w", err)
		}
		signer, ok := k.(crypto.Signer)
		if !ok {
			return nil, errors.New("id.key: not a signing key")
		}
		f.Key = signer
	}
	f.Inline = inline(certVal) && inline(keyVal)

	caVal, err := str("ca")
	if err != nil {
		return nil, err
	}
	if caVal != "" {
		if f.CAPEM, skip, err = Material(caVal, readFile); err == nil && skip {
			err = errors.New("only pem: and file: CA bundles can be read")
		}
		if err != nil {
			return nil, fmt.Errorf("id.ca: %w", err)
		}
		if f.CA, err = horizon.ParsePEM(f.CAPEM); err != nil {
			return nil, fmt.Errorf("id.ca: %w", err)
		}
	}
	return f, nil
}

// Leaf is the identity's own certificate (the first of id.cert).
func (f *File) Leaf() horizon.Cert { return f.Cert.Leaf() }

// CAPool is id.ca as a pool (nil when the file has none: the system roots then).
func (f *File) CAPool() *x509.CertPool {
	if len(f.CAPEM) == 0 {
		return nil
	}
	p := x509.NewCertPool()
	p.AppendCertsFromPEM(f.CAPEM)
	return p
}

// WithCredentials returns the file's JSON with id.cert and id.key replaced by certPEM and keyPEM
// (inline, "pem:"), every other field as it was.
func (f *File) WithCredentials(certPEM, keyPEM []byte) ([]byte, error) {
	id := make(map[string]json.RawMessage, len(f.id))
	for k, v := range f.id {
		id[k] = v
	}
	for k, v := range map[string][]byte{"cert": certPEM, "key": keyPEM} {
		b, err := json.Marshal("pem:" + string(v))
		if err != nil {
			return nil, err
		}
		id[k] = b
	}
	top := make(map[string]json.RawMessage, len(f.top))
	for k, v := range f.top {
		top[k] = v
	}
	b, err := json.Marshal(id)
	if err != nil {
		return nil, err
	}
	top["id"] = b
	out, err := json.MarshalIndent(top, "", "  ")
	if err != nil {
		return nil, err
	}
	return append(out, '\n'), nil
}

func inline(v string) bool {
	return strings.HasPrefix(v, "pem:") || strings.HasPrefix(v, "-----BEGIN")
}

func isNull(v json.RawMessage) bool { return bytes.Equal(bytes.TrimSpace(v), []byte("null")) }

// Material resolves an identity value as the openziti identity library does: inline PEM
// ("pem:…" or bare), a file path or file: URL read with readFile. skip is set for an engine
// scheme (pkcs11:, parsec:…) whose key material the agent cannot read.
func Material(value string, readFile func(string) ([]byte, error)) (data []byte, skip bool, err error) {
	if rest, ok := strings.CutPrefix(value, "pem:"); ok {
		return []byte(rest), false, nil
	}
	if strings.HasPrefix(value, "-----BEGIN") {
		return []byte(value), false, nil
	}
	u, err := url.Parse(value)
	if err != nil {
		return nil, false, errors.New("neither inline PEM nor a file path")
	}
	var path string
	switch u.Scheme {
	case "":
		path = value
	case "file":
		path = u.Path
		if path == "" {
			path = u.Opaque
		}
	default:
		return nil, true, nil
	}
	data, err = readFile(path)
	if err != nil {
		return nil, false, fmt.Errorf("referenced file %s: %w", shownPath(path), unwrapPath(err))
	}
	return data, false, nil
}

// shownPath is path for an error: an absolute one as it is; a relative one is not shown, for a
// key pasted without its PEM armour (base64 DER) reads as a relative path and must not leak.
func shownPath(path string) string {
	if filepath.IsAbs(path) {
		return path
	}
	return "(a relative path, not shown: it may be key material)"
}

// ParseKey accepts the three PEM key encodings the identity library accepts.
func ParseKey(data []byte) (crypto.PrivateKey, error) {
	for rest := data; ; {
		var block *pem.Block
		block, rest = pem.Decode(rest)
		if block == nil {
			return nil, errors.New("no PEM private key block")
		}
		switch block.Type {
		case "EC PRIVATE KEY":
			return x509.ParseECPrivateKey(block.Bytes)
		case "RSA PRIVATE KEY":
			return x509.ParsePKCS1PrivateKey(block.Bytes)
		case "PRIVATE KEY":
			return x509.ParsePKCS8PrivateKey(block.Bytes)
		}
	}
}

// KeyMatches reports whether key is the private half of cert's public key.
func KeyMatches(key crypto.PrivateKey, cert *x509.Certificate) bool {
	signer, ok := key.(crypto.Signer)
	if !ok {
		return false
	}
	pub, ok := signer.Public().(interface{ Equal(crypto.PublicKey) bool })
	return ok && pub.Equal(cert.PublicKey)
}

// SameBut reports whether raw is f's JSON apart from id.cert and id.key: what a renewal of f
// writes. A file of another enrolment, or one naming other controllers or another CA, is not.
func (f *File) SameBut(raw []byte) bool {
	var top, id map[string]json.RawMessage
	if json.Unmarshal(raw, &top) != nil || json.Unmarshal(top["id"], &id) != nil || id == nil {
		return false
	}
	return equalJSON(top, f.top, "id") && equalJSON(id, f.id, "cert", "key")
}

// equalJSON compares two JSON objects by value, leaving out the keys skip.
func equalJSON(a, b map[string]json.RawMessage, skip ...string) bool {
	n := 0
	for k, v := range a {
		if slices.Contains(skip, k) {
			continue
		}
		n++
		w, ok := b[k]
		var x, y any
		if !ok || json.Unmarshal(v, &x) != nil || json.Unmarshal(w, &y) != nil || !reflect.DeepEqual(x, y) {
			return false
		}
	}
	for k := range b {
		if !slices.Contains(skip, k) {
			n--
		}
	}
	return n == 0
}
