package ziti

import (
	"fmt"
	"net/url"
	"strconv"
	"strings"
)

const clientAPIPath = "/edge/client/v1" // where an identity file's ztAPI points

// ParseManagementURL checks ziti.url (see checkURL) and returns its base
// https://host[:port][/prefix], a management or client API path cut off. Errors name field and
// never print a password.
func ParseManagementURL(field, raw string) (string, error) {
	u, err := checkURL(field, raw)
	if err != nil {
		return "", err
	}
	prefix := strings.TrimRight(u.EscapedPath(), "/")
	for cut := true; cut; {
		cut = false
		for _, api := range []string{basePath, clientAPIPath} {
			if p, ok := strings.CutSuffix(prefix, api); ok {
				prefix, cut = strings.TrimRight(p, "/"), true
			}
		}
	}
	return "https://" + u.Host + prefix, nil
}

// parseClientAPI returns the base of a ztAPI entry (the client API URL or its bare base). Any
// other path is refused: nothing says where the management API would be.
func parseClientAPI(field, raw string) (string, error) {
	u, err := checkURL(field, raw)
	if err != nil {
		return "", err
	}
	p := strings.TrimRight(u.EscapedPath(), "/")
	switch {
	case p == "":
	case strings.HasSuffix(p, clientAPIPath):
		p = strings.TrimRight(strings.TrimSuffix(p, clientAPIPath), "/")
	default:
		return "", fmt.Errorf("%s: %q: path %q is not the client API (…%s), so the management API cannot be found from it; set ziti.url", field, u.Redacted(), u.Path, clientAPIPath)
	}
	return "https://" + u.Host + p, nil
}

// checkURL parses raw as an https URL with a host, an optional port 1–65535, and no user
// information, query or fragment.
func checkURL(field, raw string) (*url.URL, error) {
	u, err := url.Parse(raw)
	if err != nil {
		if strings.Contains(raw, "@") {
			// It may hold a password, and url's error quotes the whole string.
			return nil, fmt.Errorf("%s: not a URL", field)
		}
		return nil, fmt.Errorf("%s: %q is not a URL", field, raw)
	}
	shown := u.Redacted()
	switch {
	case u.Scheme != "https":
		return nil, fmt.Errorf("%s: %q is not an https URL (the controller's APIs are served over https only)", field, shown)
	case u.Opaque != "":
		return nil, fmt.Errorf("%s: %q is not a URL", field, shown)
	case u.User != nil:
		return nil, fmt.Errorf("%s: %q carries a user or password; credentials go in ziti.username and ziti.password_file, or ziti.identity", field, shown)
	case u.RawQuery != "" || u.ForceQuery || u.Fragment != "" || strings.Contains(raw, "#"):
		return nil, fmt.Errorf("%s: %q has a query or fragment; give scheme, host, port and path only", field, shown)
	case u.Hostname() == "":
		return nil, fmt.Errorf("%s: %q has no host", field, shown)
	}
	if strings.HasSuffix(u.Host, ":") {
		return nil, fmt.Errorf("%s: %q has an empty port", field, shown)
	}
	if p := u.Port(); p != "" {
		n, err := strconv.Atoi(p)
		if err != nil || n < 1 || n > 65535 {
			return nil, fmt.Errorf("%s: %q: port %s is not 1-65535", field, shown, p)
		}
	}
	return u, nil
}
