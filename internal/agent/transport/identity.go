package transport

import (
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"net/url"
	"os"
	"strings"

	"scm.tikali.ai/tikali/applications/monky/monky-deployd/internal/agent/identity"
	"scm.tikali.ai/tikali/applications/monky/monky-deployd/internal/shared/horizon"
)

// identityFile is the part of a ziti identity file the pre-flight looks at.
type identityFile struct {
	ZtAPI  string   `json:"ztAPI"`
	ZtAPIs []string `json:"ztAPIs"`
	ID     struct {
		Cert string `json:"cert"`
		Key  string `json:"key"`
		CA   string `json:"ca"`
	} `json:"id"`
}

// CheckIdentity names the first fault of the ziti identity at path as an *IdentityError (absent,
// unreadable, empty, not JSON, no controller URL, bad or mismatched cert/key). Why: the SDK calls
// "unreadable" "not found", exits on a bad cert and panics on a garbage key, and the Python
// agent's C SDK failed minutes later at dial, which read as a mesh fault (env-dev-08, 2026-09-09).
func CheckIdentity(path string, readFile func(string) ([]byte, error)) error {
	_, err := checkIdentity(path, readFile)
	return err
}

// checkIdentity also returns the checked bytes, so the loader parses exactly what was checked.
func checkIdentity(path string, readFile func(string) ([]byte, error)) ([]byte, error) {
	if readFile == nil {
		readFile = identity.ReadFile
	}
	fail := func(kind error, cause error, format string, args ...any) error {
		return &IdentityError{Path: path, Reason: fmt.Sprintf(format, args...), Kind: kind, Err: cause}
	}
	if path == "" {
		return nil, fail(ErrIdentityMissing, nil, "is not configured (config key `identity`)")
	}
	raw, err := readFile(path)
	switch {
	case errors.Is(err, fs.ErrNotExist):
		return nil, fail(ErrIdentityMissing, err, "does not exist")
	case errors.Is(err, fs.ErrPermission):
		// The fix is the group, not an ACL: ziti-edge-tunnel's identity rewrites drop POSIX ACLs
		// (seed 0.1.8).
		return nil, fail(ErrIdentityUnreadable, err,
			"is not readable by this user (uid %d): add the agent's user to the file's group, "+
				"usually `ziti` (usermod -a -G ziti monky-deployd); an ACL is not enough because "+
				"ziti-edge-tunnel rewrites the file on every config refresh and the rewrite drops ACLs",
			os.Geteuid())
	case err != nil:
		return nil, fail(ErrIdentityUnreadable, err, "cannot be read: %v", err)
	}
	if len(strings.TrimSpace(string(raw))) == 0 {
		return nil, fail(ErrIdentityMalformed, nil, "is empty")
	}

	var id identityFile
	if err := json.Unmarshal(raw, &id); err != nil {
		var typeErr *json.UnmarshalTypeError
		if errors.As(err, &typeErr) {
			// The message names the field and the JSON type, never the value.
			return nil, fail(ErrIdentityMalformed, err, "is not a ziti identity: %v", err)
		}
		return nil, fail(ErrIdentityMalformed, err, "is not valid JSON: %v", err)
	}
	if err := checkControllers(id.ZtAPI, id.ZtAPIs); err != nil {
		return nil, fail(ErrIdentityMalformed, nil, "is not a ziti identity: %v", err)
	}

	if id.ID.Cert == "" {
		return nil, fail(ErrIdentityBadCert, nil, "has no certificate (id.cert is empty)")
	}
	certPEM, skip, err := identity.Material(id.ID.Cert, readFile)
	if err != nil {
		return nil, fail(ErrIdentityBadCert, err, "has a bad certificate (id.cert): %v", err)
	}
	if skip {
		return nil, fail(ErrIdentityBadCert, nil, "has a bad certificate (id.cert): only pem: and file: certificates can be loaded")
	}
	certs, err := horizon.ParsePEM(certPEM)
	if err != nil {
		return nil, fail(ErrIdentityBadCert, err, "has a bad certificate (id.cert): %v", err)
	}

	if id.ID.Key == "" {
		return nil, fail(ErrIdentityBadKey, nil, "has no private key (id.key is empty)")
	}
	keyPEM, skip, err := identity.Material(id.ID.Key, readFile)
	if err != nil {
		return nil, fail(ErrIdentityBadKey, err, "has a bad private key (id.key): %v", err)
	}
	if !skip { // a hardware-engine key (pkcs11:, parsec:) is the SDK's to load, not ours to parse
		key, err := identity.ParseKey(keyPEM)
		if err != nil {
			return nil, fail(ErrIdentityBadKey, err, "has a bad private key (id.key): %v", err)
		}
		if !identity.KeyMatches(key, certs.Leaf().X509) {
			return nil, fail(ErrIdentityBadKey, nil, "has a private key (id.key) that does not belong to its certificate (id.cert)")
		}
	}

	if id.ID.CA != "" {
		caPEM, skip, err := identity.Material(id.ID.CA, readFile)
		if err == nil && skip {
			err = errors.New("only pem: and file: CA bundles can be loaded")
		}
		if err == nil {
			_, err = horizon.ParsePEM(caPEM)
		}
		if err != nil {
			return nil, fail(ErrIdentityBadCert, err, "has a bad CA bundle (id.ca): %v", err)
		}
	}
	return raw, nil
}

// checkControllers wants at least one https controller URL; a URL is not a secret and is quoted.
func checkControllers(single string, many []string) error {
	urls := many
	if len(urls) == 0 && single != "" {
		urls = []string{single}
	}
	if len(urls) == 0 {
		return errors.New("no controller URL (ztAPI and ztAPIs are empty)")
	}
	for _, s := range urls {
		u, err := url.Parse(s)
		if err != nil || u.Scheme != "https" || u.Host == "" {
			return fmt.Errorf("controller URL %q is not an https URL", s)
		}
	}
	return nil
}
