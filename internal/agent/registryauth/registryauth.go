// Package registryauth turns the registry credential a manifest names (`use: registry-auth`) into
// the agent's own Docker config. Never an env var (every container would see the password), and
// in a directory the agent owns: the unit's user cannot see a human's or root's `docker login`
// (seed 0.1.7, env-dev-01).
package registryauth

import (
	"bytes"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"
	"unicode"

	"scm.tikali.ai/tikali/applications/monky/monky-deployd/internal/shared/atomicfile"
	"scm.tikali.ai/tikali/applications/monky/monky-deployd/internal/shared/capread"
	"scm.tikali.ai/tikali/applications/monky/monky-deployd/internal/shared/clip"
	"scm.tikali.ai/tikali/applications/monky/monky-deployd/internal/shared/secret"
	"scm.tikali.ai/tikali/applications/monky/monky-deployd/internal/shared/strictjson"
)

// Use is the manifest `use:` value that marks the registry pull credential.
const Use = "registry-auth"

// ConfigFile is the file name docker reads under DOCKER_CONFIG.
const ConfigFile = "config.json"

// ErrInvalid is wrapped by every Parse error; messages never quote the value.
var ErrInvalid = errors.New("registry credential unusable")

// Auth is a parsed registry credential. Password prints as `***`.
type Auth struct {
	Registry string
	Username string
	Password secret.Value
}

func invalid(msg string) error { return fmt.Errorf("registry-auth: %s: %w", msg, ErrInvalid) }

// Parse reads JSON {"registry", "username", "password"} or `username:password`, split at the
// FIRST colon (a password may hold colons, a docker username may not).
func Parse(value secret.Value, defaultRegistry string) (Auth, error) {
	text := strings.TrimSpace(value.Reveal())
	if text == "" {
		return Auth{}, invalid("the value is empty")
	}
	var a Auth
	var password string
	if strings.HasPrefix(text, "{") {
		var err error
		a, password, err = parseJSON(text)
		if err != nil {
			return Auth{}, err
		}
	} else {
		user, pw, ok := strings.Cut(text, ":")
		if !ok {
			return Auth{}, invalid("the value is neither a JSON object nor username:password")
		}
		a.Username, password = user, pw
	}
	if a.Registry == "" {
		if defaultRegistry == "" {
			return Auth{}, invalid("no registry in the credential and no registry_host configured")
		}
		a.Registry = defaultRegistry
	}
	if err := checkRegistry(a.Registry); err != nil {
		return Auth{}, err
	}
	switch {
	case a.Username == "":
		return Auth{}, invalid("username is empty")
	case strings.Contains(a.Username, ":"):
		// docker splits the decoded auth at the first colon: such a username cannot work.
		return Auth{}, invalid("username contains a colon")
	case strings.IndexFunc(a.Username, unicode.IsControl) >= 0:
		return Auth{}, invalid("username contains a control character")
	case password == "":
		return Auth{}, invalid("password is empty")
	}
	a.Password = secret.New(password)
	return a, nil
}

func parseJSON(text string) (Auth, string, error) {
	var raw map[string]json.RawMessage
	// Which of two passwords is meant is no guess to make; the decoder's error is not passed on.
	if err := strictjson.Unmarshal([]byte(text), &raw); err != nil {
		var se *strictjson.Error
		switch {
		case errors.As(err, &se) && se.Trailing:
			return Auth{}, "", invalid("the value has trailing data after the JSON object")
		case errors.As(err, &se) && se.Duplicate && !strings.Contains(se.Pointer[1:], "/"):
			return Auth{}, "", invalid(fmt.Sprintf("JSON field %q is given twice", clip.Head(se.Key, 32)))
		}
		return Auth{}, "", invalid("the value starts with '{' but is not a JSON object")
	}
	var a Auth
	var password string
	for _, f := range []struct {
		name string
		dst  *string
	}{{"registry", &a.Registry}, {"username", &a.Username}, {"password", &password}} {
		v, ok := raw[f.name]
		if !ok || bytes.Equal(bytes.TrimSpace(v), []byte("null")) {
			continue
		}
		if err := json.Unmarshal(v, f.dst); err != nil {
			return Auth{}, "", invalid(fmt.Sprintf("JSON field %q is not a string", f.name))
		}
	}
	return a, password, nil
}

// checkRegistry accepts docker's auths keys (host[:port], maybe a scheme or path) and refuses
// whitespace and control characters.
func checkRegistry(r string) error {
	if strings.IndexFunc(r, func(c rune) bool { return unicode.IsSpace(c) || unicode.IsControl(c) }) >= 0 {
		return invalid("registry contains whitespace or a control character")
	}
	return nil
}

// Encoded is config.json's base64("<username>:<password>"), a secret docker echoes in errors:
// register it with the redactor beside the password.
func (a Auth) Encoded() secret.Value {
	return secret.New(base64.StdEncoding.EncodeToString([]byte(a.Username + ":" + a.Password.Reveal())))
}

type dockerConfig struct {
	Auths map[string]dockerAuth `json:"auths"`
}

type dockerAuth struct {
	Auth string `json:"auth"`
}

// WriteDockerConfig atomically replaces <dir>/config.json (0600, dir 0700) with a alone, never
// merged: no stray credsStore or stale registry. The same Auth yields the same bytes.
func WriteDockerConfig(dir string, a Auth) error {
	if a.Registry == "" || a.Username == "" || a.Password.Empty() {
		return fmt.Errorf("registry-auth: write docker config in %q: incomplete credential", dir)
	}
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return fmt.Errorf("registry-auth: create %q: %w", dir, err)
	}
	// MkdirAll keeps an existing mode, the umask narrows a new one: 0700 either way.
	if err := os.Chmod(dir, 0o700); err != nil {
		return fmt.Errorf("registry-auth: chmod %q: %w", dir, err)
	}
	doc, err := json.MarshalIndent(dockerConfig{Auths: map[string]dockerAuth{a.Registry: {Auth: a.Encoded().Reveal()}}}, "", "\t")
	if err != nil {
		return fmt.Errorf("registry-auth: encode docker config: %w", err)
	}
	path := filepath.Join(dir, ConfigFile)
	if err := atomicfile.WriteFile(path, append(doc, '\n'), 0o600); err != nil {
		return fmt.Errorf("registry-auth: %w", err)
	}
	return nil
}

// maxConfigBytes bounds what ReadDockerConfig reads: the agent writes one registry's entry.
const maxConfigBytes = 64 << 10

// ReadDockerConfig returns the secrets of the Docker config the agent wrote in dir: each
// registry's encoded auth and the password inside it, so operator text can be checked against
// them. A missing config is no secret and no error; an unreadable one is an error that never
// quotes the file.
func ReadDockerConfig(dir string) ([]secret.Value, error) {
	f, _, err := capread.Open(filepath.Join(dir, ConfigFile))
	if errors.Is(err, os.ErrNotExist) {
		return nil, nil
	} else if err != nil {
		return nil, fmt.Errorf("registry-auth: %w", err)
	}
	defer f.Close()
	raw, err := io.ReadAll(io.LimitReader(f, maxConfigBytes+1))
	if err != nil {
		return nil, fmt.Errorf("registry-auth: read %s: %w", ConfigFile, err)
	}
	if len(raw) > maxConfigBytes {
		return nil, fmt.Errorf("registry-auth: %s is larger than %d bytes", ConfigFile, maxConfigBytes)
	}
	var doc dockerConfig
	if err := json.Unmarshal(raw, &doc); err != nil {
		return nil, fmt.Errorf("registry-auth: %s is not a docker config (position %d)", ConfigFile, jsonOffset(err))
	}
	var out []secret.Value
	for _, a := range doc.Auths {
		if a.Auth == "" {
			continue
		}
		out = append(out, secret.New(a.Auth))
		dec, err := base64.StdEncoding.DecodeString(a.Auth)
		if err != nil {
			continue // not base64: the encoded text itself is the secret
		}
		if _, pass, ok := strings.Cut(string(dec), ":"); ok && pass != "" {
			out = append(out, secret.New(pass))
		}
	}
	return out, nil
}

// jsonOffset is where a decode error happened, never the text around it (it may be a secret).
func jsonOffset(err error) int64 {
	var se *json.SyntaxError
	if errors.As(err, &se) {
		return se.Offset
	}
	var te *json.UnmarshalTypeError
	if errors.As(err, &te) {
		return te.Offset
	}
	return -1
}
