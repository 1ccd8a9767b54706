// Package config resolves fleetctl's settings: flags beat FLEETCTL_* env beat the (strict) config
// file; secrets come from files or env, never the config file, held as secret.Value.
package config

import (
	"errors"
	"fmt"
	"io/fs"
	"path/filepath"
	"strings"

	"go.yaml.in/yaml/v3"

	"scm.tikali.ai/tikali/applications/monky/monky-deployd/internal/shared/yamldoc"

	"scm.tikali.ai/tikali/applications/monky/monky-deployd/internal/shared/secret"
)

// ErrInvalid marks every configuration error: the CLI exits 2 on it.
var ErrInvalid = errors.New("invalid configuration")

// Environment variables, read in Resolve and nowhere else.
const (
	EnvZitiURL        = "FLEETCTL_ZITI_URL"
	EnvZitiUsername   = "FLEETCTL_ZITI_USERNAME"
	EnvZitiPassword   = "FLEETCTL_ZITI_PASSWORD"
	EnvZitiIdentity   = "FLEETCTL_ZITI_IDENTITY"
	EnvZitiCAFile     = "FLEETCTL_ZITI_CA_FILE"
	EnvTenancyURL     = "FLEETCTL_TENANCY_URL"
	EnvTenancyToken   = "FLEETCTL_TENANCY_TOKEN"
	EnvExporterListen = "FLEETCTL_EXPORTER_LISTEN"
)

// File is the config file.
type File struct {
	Path     string // "" when there was none
	Ziti     ZitiFile
	Tenancy  TenancyFile
	Exporter ExporterFile
}

// ExporterFile is the `exporter:` section.
type ExporterFile struct{ Listen string }

// ZitiFile is the `ziti:` section.
type ZitiFile struct{ URL, Username, PasswordFile, Identity, CAFile string }

// TenancyFile is the `tenancy:` section.
type TenancyFile struct{ URL, TokenFile string }

// keys maps every accepted key to where its value goes.
func (f *File) keys() map[string]*string {
	return map[string]*string{
		"ziti.url": &f.Ziti.URL, "ziti.username": &f.Ziti.Username, "ziti.password_file": &f.Ziti.PasswordFile,
		"ziti.identity": &f.Ziti.Identity, "ziti.ca_file": &f.Ziti.CAFile,
		"tenancy.url": &f.Tenancy.URL, "tenancy.token_file": &f.Tenancy.TokenFile,
		"exporter.listen": &f.Exporter.Listen,
	}
}

// inlineSecrets are keys people try; they get a sentence instead of "unknown key".
var inlineSecrets = map[string]string{
	"ziti.password": "ziti.password_file or " + EnvZitiPassword,
	"tenancy.token": "tenancy.token_file or " + EnvTenancyToken,
}

// Parse reads a config file's content; name is for errors, paths are relative to its directory.
func Parse(data []byte, name string) (*File, error) {
	f := &File{Path: name}
	root, err := yamldoc.Root(data)
	if err != nil {
		return nil, fmt.Errorf("config %s: %w: %v", name, ErrInvalid, err)
	}
	if root == nil {
		return f, nil // empty file
	}
	if root.Kind != yaml.MappingNode {
		return nil, bad(name, root, "the file must be a mapping with ziti:, tenancy: and exporter: sections")
	}
	dests := f.keys()
	seen := map[string]bool{}
	for i := 0; i+1 < len(root.Content); i += 2 {
		sk, sv := root.Content[i], root.Content[i+1]
		section := sk.Value
		if section != "ziti" && section != "tenancy" && section != "exporter" {
			return nil, bad(name, sk, fmt.Sprintf("unknown key %q", section))
		}
		if seen[section] {
			return nil, bad(name, sk, fmt.Sprintf("key %q appears twice", section))
		}
		seen[section] = true
		if yamldoc.IsNull(sv) {
			continue
		}
		if sv.Kind != yaml.MappingNode {
			return nil, bad(name, sv, fmt.Sprintf("%s: want a mapping", section))
		}
		for j := 0; j+1 < len(sv.Content); j += 2 {
			k, v := sv.Content[j], sv.Content[j+1]
			key := section + "." + k.Value
			if hint, ok := inlineSecrets[key]; ok {
				return nil, bad(name, k, fmt.Sprintf("%s: secrets are not kept in the config file; use %s", key, hint))
			}
			dest, ok := dests[key]
			if !ok {
				return nil, bad(name, k, fmt.Sprintf("unknown key %q", key))
			}
			if seen[key] {
				return nil, bad(name, k, fmt.Sprintf("key %q appears twice", key))
			}
			seen[key] = true
			switch {
			case yamldoc.IsNull(v):
			case v.Kind == yaml.ScalarNode && v.Tag == "!!str":
				*dest = v.Value
			default:
				return nil, bad(name, v, fmt.Sprintf("%s: want a string", key))
			}
		}
	}
	if name != "" {
		base := filepath.Dir(name)
		for _, p := range []*string{&f.Ziti.PasswordFile, &f.Ziti.Identity, &f.Ziti.CAFile, &f.Tenancy.TokenFile} {
			if *p != "" && !filepath.IsAbs(*p) {
				*p = filepath.Join(base, *p)
			}
		}
	}
	return f, nil
}

func bad(name string, n *yaml.Node, msg string) error {
	return fmt.Errorf("config %s: line %d: %w: %s", name, n.Line, ErrInvalid, msg)
}

// Load reads the config file at path; a missing one is an error only when explicit.
func Load(path string, explicit bool, readFile func(string) ([]byte, error)) (*File, error) {
	if path == "" {
		return &File{}, nil
	}
	b, err := readFile(path)
	if err != nil {
		if !explicit && errors.Is(err, fs.ErrNotExist) {
			return &File{}, nil
		}
		return nil, fmt.Errorf("config %s: %w: %v", path, ErrInvalid, err)
	}
	return Parse(b, path)
}

// DefaultPath honours XDG_CONFIG_HOME, else HOME; "" when neither is set.
func DefaultPath(getenv func(string) string) string {
	if x := getenv("XDG_CONFIG_HOME"); x != "" {
		return filepath.Join(x, "fleetctl", "config.yaml")
	}
	if h := getenv("HOME"); h != "" {
		return filepath.Join(h, ".config", "fleetctl", "config.yaml")
	}
	return ""
}

// Flags are the command-line overrides; secrets have none (argv is world-readable), only files.
type Flags struct {
	ZitiURL, ZitiUsername, ZitiPasswordFile, ZitiIdentity, ZitiCAFile string
	TenancyURL, TenancyTokenFile, ExporterListen                      string
}

// Authentication methods to the controller.
const (
	AuthCert     = "cert"     // ziti.identity
	AuthPassword = "password" // ziti.username with ziti.password_file / FLEETCTL_ZITI_PASSWORD
)

// Settings are the resolved values.
type Settings struct {
	// ZitiURL "" is later set to the controller the identity file names.
	ZitiURL string
	// ZitiAuth is AuthCert, AuthPassword or ""; only the chosen method's settings are kept.
	ZitiAuth       string
	ZitiUsername   string
	ZitiPassword   secret.Value
	ZitiIdentity   string
	ZitiCAFile     string
	TenancyURL     string
	TenancyToken   secret.Value
	ExporterListen string
	// Origin says where each value came from ("env FLEETCTL_ZITI_URL"), for -v; never a value.
	Origin map[string]string
}

// Levels a setting can come from, lowest first.
const (
	levelNone = iota
	levelFile
	levelEnv
	levelFlag
)

var levelNames = [...]string{levelFile: "the config file", levelEnv: "the environment", levelFlag: "flags"}

// authMethod picks the auth method from the highest level that names one, so `--ziti-username`
// beats the file's ziti.identity; both at one level is an error naming both.
func authMethod(f *File, getenv func(string) string, fl Flags) (method, origin string, err error) {
	type setting struct {
		level int
		name  string
	}
	at := func(flagName, flagVal, envName, fileKey, fileVal string) setting {
		switch {
		case flagVal != "":
			return setting{levelFlag, "--" + flagName}
		case getenv(envName) != "":
			return setting{levelEnv, envName}
		case fileVal != "":
			return setting{levelFile, fileKey}
		}
		return setting{}
	}
	cert := []setting{at("ziti-identity", fl.ZitiIdentity, EnvZitiIdentity, "ziti.identity", f.Ziti.Identity)}
	pass := []setting{
		at("ziti-username", fl.ZitiUsername, EnvZitiUsername, "ziti.username", f.Ziti.Username),
		at("ziti-password-file", fl.ZitiPasswordFile, EnvZitiPassword, "ziti.password_file", f.Ziti.PasswordFile),
	}
	top := func(ss []setting) (int, string) {
		lvl, names := levelNone, []string{}
		for _, s := range ss {
			switch {
			case s.level > lvl:
				lvl, names = s.level, []string{s.name}
			case s.level == lvl && s.level != levelNone:
				names = append(names, s.name)
			}
		}
		return lvl, strings.Join(names, " and ")
	}
	cl, cn := top(cert)
	pl, pn := top(pass)
	where := func(lvl int) string {
		if lvl == levelFile && f.Path != "" {
			return "the config file " + f.Path
		}
		return levelNames[lvl]
	}
	switch {
	case cl == levelNone && pl == levelNone:
		return "", "", nil
	case cl == pl:
		return "", "", fmt.Errorf("%w: certificate auth (%s) and password auth (%s) are both given in %s; keep one",
			ErrInvalid, cn, pn, where(cl))
	case cl > pl:
		origin = "certificate: " + cn + " in " + where(cl)
		if pl != levelNone {
			origin += ", over " + pn + " in " + where(pl)
		}
		return AuthCert, origin, nil
	default:
		origin = "password: " + pn + " in " + where(pl)
		if cl != levelNone {
			origin += ", over " + cn + " in " + where(cl)
		}
		return AuthPassword, origin, nil
	}
}

// Resolve layers flags over env over file. Secret files are read here.
func Resolve(f *File, getenv func(string) string, fl Flags, readFile func(string) ([]byte, error)) (*Settings, error) {
	if f == nil {
		f = &File{}
	}
	s := &Settings{Origin: map[string]string{}}
	pick := func(key, flagName, flagVal, envName, fileVal string) string {
		switch {
		case flagVal != "":
			s.Origin[key] = "flag --" + flagName
			return flagVal
		case envName != "" && getenv(envName) != "":
			s.Origin[key] = "env " + envName
			return getenv(envName)
		case fileVal != "":
			s.Origin[key] = "file " + f.Path
			return fileVal
		}
		return ""
	}
	s.ZitiURL = pick("ziti.url", "ziti-url", fl.ZitiURL, EnvZitiURL, f.Ziti.URL)
	method, origin, err := authMethod(f, getenv, fl)
	if err != nil {
		return nil, err
	}
	if method != "" {
		s.ZitiAuth = method
		s.Origin["ziti.auth"] = origin
	}
	switch method {
	case AuthCert:
		s.ZitiIdentity = pick("ziti.identity", "ziti-identity", fl.ZitiIdentity, EnvZitiIdentity, f.Ziti.Identity)
	case AuthPassword:
		s.ZitiUsername = pick("ziti.username", "ziti-username", fl.ZitiUsername, EnvZitiUsername, f.Ziti.Username)
		if s.ZitiPassword, err = secretFrom(s, "ziti.password", "ziti-password-file", fl.ZitiPasswordFile, EnvZitiPassword, "ziti.password_file", f.Ziti.PasswordFile, f.Path, getenv, readFile); err != nil {
			return nil, err
		}
	}
	s.ZitiCAFile = pick("ziti.ca_file", "ziti-ca-file", fl.ZitiCAFile, EnvZitiCAFile, f.Ziti.CAFile)
	s.TenancyURL = pick("tenancy.url", "tenancy-url", fl.TenancyURL, EnvTenancyURL, f.Tenancy.URL)
	s.ExporterListen = pick("exporter.listen", "listen", fl.ExporterListen, EnvExporterListen, f.Exporter.Listen)

	if s.TenancyToken, err = secretFrom(s, "tenancy.token", "tenancy-token-file", fl.TenancyTokenFile, EnvTenancyToken, "tenancy.token_file", f.Tenancy.TokenFile, f.Path, getenv, readFile); err != nil {
		return nil, err
	}
	return s, nil
}

// secretFrom resolves a secret: flag's file, else the env var, else the config's file.
func secretFrom(s *Settings, key, flagName, flagFile, envName, fileKey, fileFile, cfgPath string,
	getenv func(string) string, readFile func(string) ([]byte, error)) (secret.Value, error) {
	path := ""
	switch {
	case flagFile != "":
		path = flagFile
		s.Origin[key] = "file " + flagFile + " (flag --" + flagName + ")"
	case getenv(envName) != "":
		s.Origin[key] = "env " + envName
		return secret.New(strings.TrimSpace(getenv(envName))), nil
	case fileFile != "":
		path = fileFile
		s.Origin[key] = "file " + fileFile + " (" + fileKey + " in " + cfgPath + ")"
	default:
		return secret.Value{}, nil
	}
	b, err := readFile(path)
	if err != nil {
		return secret.Value{}, fmt.Errorf("%s: %w: %v", key, ErrInvalid, err)
	}
	v := strings.TrimSpace(string(b))
	if v == "" {
		return secret.Value{}, fmt.Errorf("%s: %w: %s is empty", key, ErrInvalid, path)
	}
	return secret.New(v), nil
}

// CheckZiti says what is missing to reach the controller (under cert auth, ziti.url may be unset).
func (s *Settings) CheckZiti() error {
	if s.ZitiIdentity != "" {
		return nil
	}
	if s.ZitiURL == "" {
		return fmt.Errorf("%w: ziti.url is not set (config ziti.url, %s or --ziti-url; or ziti.identity, whose file names the controller)", ErrInvalid, EnvZitiURL)
	}
	switch {
	case s.ZitiAuth == AuthPassword && s.ZitiUsername == "":
		return fmt.Errorf("%w: no ziti credentials: password auth (%s) needs ziti.username (%s or --ziti-username)", ErrInvalid, s.Origin["ziti.auth"], EnvZitiUsername)
	case s.ZitiAuth == AuthPassword && s.ZitiPassword.Empty():
		return fmt.Errorf("%w: no ziti credentials: password auth (%s) needs a password: ziti.password_file, --ziti-password-file or %s", ErrInvalid, s.Origin["ziti.auth"], EnvZitiPassword)
	case s.ZitiUsername == "" || s.ZitiPassword.Empty():
		return fmt.Errorf("%w: no ziti credentials: set ziti.identity (%s) for certificate auth, or ziti.username (%s) with ziti.password_file or %s",
			ErrInvalid, EnvZitiIdentity, EnvZitiUsername, EnvZitiPassword)
	}
	return nil
}

// CheckTenancy says what is missing to reach tenancy's admin API.
func (s *Settings) CheckTenancy() error {
	if s.TenancyURL == "" {
		return fmt.Errorf("%w: tenancy.url is not set (config tenancy.url, %s or --tenancy-url)", ErrInvalid, EnvTenancyURL)
	}
	if s.TenancyToken.Empty() {
		return fmt.Errorf("%w: no tenancy admin token: set tenancy.token_file or %s", ErrInvalid, EnvTenancyToken)
	}
	return nil
}
