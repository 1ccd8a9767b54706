// Command demoapp is the service of the dev stack's example bundles (`make demo`) and of the
// integration and end-to-end tests' image: a static HTTP server with
// no dependency beyond the standard library, so the image is one file imported with
// `docker import` and nothing is pulled from a public registry. Its health is switched per
// compose service through its environment, which is how a test makes a deploy go unhealthy or
// stay "starting".
//
//	/               "monky demo app <version>"
//	/version        the version linked in with -X main.version
//	/env?name=X     the value of env var X, byte for byte (404 when unset)
//	/file?path=P    the content of file P (a bundle file mounted into the container)
//	/healthz        200 when healthy, 503 otherwise
//
// `/app -check` is the compose healthcheck: exit 0 when /healthz answers 200. `/app -get PATH`
// prints the body of GET PATH on the running server (exit 1 unless 200): the image holds no
// curl, so tests read a container's view with `docker exec <c> /app -get /env?name=X`.
//
// Environment: APP_HEALTHY=false keeps /healthz at 503 forever; APP_READY_AFTER_MS=N answers 503
// until the server has been up N ms; APP_EXIT_CODE=N makes the server exit N at start (a crashing
// service); APP_EXIT_IF_FILE=PATH does the same, exit 3, while PATH exists (a service that
// crashes once something outside its release changed: a test toggles it through a bind mount);
// APP_LOG_ENV=NAME prints `NAME=<value>` of that variable at start, so a secret reaches
// `compose logs` (what the agent must redact in a failed apply's log tail); APP_LISTEN (default
// :8080).
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/signal"
	"regexp"
	"strconv"
	"strings"
	"syscall"
	"time"
)

var version = "dev"

func main() {
	check := flag.Bool("check", false, "healthcheck: exit 0 when the server answers /healthz with 200")
	get := flag.String("get", "", "print the body of GET `path` on the running server")
	flag.Parse()
	cfg, err := loadConfig(os.LookupEnv)
	if err != nil {
		fmt.Fprintln(os.Stderr, "demoapp:", err)
		os.Exit(2)
	}
	if *check {
		os.Exit(runCheck(cfg))
	}
	if *get != "" {
		os.Exit(runGet(cfg, *get, os.Stdout))
	}
	if cfg.exitCode != 0 {
		fmt.Fprintf(os.Stderr, "demoapp: exiting %d as APP_EXIT_CODE asks\n", cfg.exitCode)
		os.Exit(cfg.exitCode)
	}
	if cfg.exitIfFile != "" {
		if _, err := os.Stat(cfg.exitIfFile); err == nil {
			fmt.Fprintf(os.Stderr, "demoapp: exiting 3: %s exists (APP_EXIT_IF_FILE)\n", cfg.exitIfFile)
			os.Exit(3)
		}
	}
	if err := serve(cfg); err != nil {
		fmt.Fprintln(os.Stderr, "demoapp:", err)
		os.Exit(1)
	}
}

type config struct {
	listen     string
	healthy    bool
	readyAfter time.Duration
	exitCode   int
	logEnv     string // APP_LOG_ENV: a variable whose value the start lines print
	exitIfFile string // APP_EXIT_IF_FILE: exit 3 at start while this file exists
}

// envName is what APP_LOG_ENV may name: a shell variable name.
var envName = regexp.MustCompile(`^[A-Za-z_][A-Za-z0-9_]*$`)

// loadConfig reads the APP_* variables; a bad value is an error naming the variable, so a typo in
// a test's compose file fails loudly instead of silently meaning "healthy".
func loadConfig(lookup func(string) (string, bool)) (config, error) {
	cfg := config{listen: ":8080", healthy: true}
	if v, ok := lookup("APP_LISTEN"); ok && v != "" {
		cfg.listen = v
	}
	if v, ok := lookup("APP_HEALTHY"); ok && v != "" {
		b, err := strconv.ParseBool(v)
		if err != nil {
			return cfg, fmt.Errorf("APP_HEALTHY: %q is not a boolean", v)
		}
		cfg.healthy = b
	}
	if v, ok := lookup("APP_READY_AFTER_MS"); ok && v != "" {
		n, err := strconv.ParseInt(v, 10, 64)
		if err != nil || n < 0 || n > int64(24*time.Hour/time.Millisecond) {
			return cfg, fmt.Errorf("APP_READY_AFTER_MS: %q is not a number of milliseconds up to a day", v)
		}
		cfg.readyAfter = time.Duration(n) * time.Millisecond
	}
	if v, ok := lookup("APP_EXIT_CODE"); ok && v != "" {
		n, err := strconv.Atoi(v)
		if err != nil || n < 0 || n > 255 {
			return cfg, fmt.Errorf("APP_EXIT_CODE: %q is not an exit code 0..255", v)
		}
		cfg.exitCode = n
	}
	if v, ok := lookup("APP_EXIT_IF_FILE"); ok && v != "" {
		if !strings.HasPrefix(v, "/") {
			return cfg, fmt.Errorf("APP_EXIT_IF_FILE: %q is not an absolute path", v)
		}
		cfg.exitIfFile = v
	}
	if v, ok := lookup("APP_LOG_ENV"); ok && v != "" {
		if !envName.MatchString(v) {
			return cfg, fmt.Errorf("APP_LOG_ENV: %q is not a variable name", v)
		}
		cfg.logEnv = v
	}
	return cfg, nil
}

func serve(cfg config) error {
	srv := &http.Server{
		Addr:              cfg.listen,
		Handler:           newHandler(cfg, time.Now(), time.Now, os.LookupEnv, os.ReadFile),
		ReadHeaderTimeout: 10 * time.Second,
	}
	// PID 1 in a container gets no default signal handling: without this, `compose down` waits
	// its full stop timeout for every test container.
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM, syscall.SIGINT)
	defer stop()
	go func() {
		<-ctx.Done()
		shutdown, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		_ = srv.Shutdown(shutdown)
	}()
	// Lines in `compose logs`, which the agent sends as the log tail of a failed apply.
	for _, l := range startLines(cfg, os.LookupEnv) {
		fmt.Println(l)
	}
	if err := srv.ListenAndServe(); err != nil && !errors.Is(err, http.ErrServerClosed) {
		return err
	}
	return nil
}

// startLines are what the server prints when it starts: where it listens and, with
// APP_LOG_ENV, the named variable's value as it is (a test's stand-in for an app that logs a
// secret).
func startLines(cfg config, lookup func(string) (string, bool)) []string {
	lines := []string{fmt.Sprintf("demoapp %s listening on %s (healthy=%t)", version, cfg.listen, cfg.healthy)}
	if cfg.logEnv != "" {
		if v, ok := lookup(cfg.logEnv); ok {
			lines = append(lines, fmt.Sprintf("demoapp: APP_LOG_ENV: %s=%s", cfg.logEnv, v))
		} else {
			lines = append(lines, fmt.Sprintf("demoapp: APP_LOG_ENV: %s is not set", cfg.logEnv))
		}
	}
	return lines
}

func newHandler(cfg config, started time.Time, now func() time.Time,
	lookup func(string) (string, bool), readFile func(string) ([]byte, error)) http.Handler {
	mux := http.NewServeMux()
	mux.HandleFunc("GET /{$}", func(w http.ResponseWriter, r *http.Request) {
		fmt.Fprintf(w, "monky demo app %s\n", version)
	})
	mux.HandleFunc("GET /version", func(w http.ResponseWriter, r *http.Request) {
		io.WriteString(w, version)
	})
	mux.HandleFunc("GET /env", func(w http.ResponseWriter, r *http.Request) {
		name := r.URL.Query().Get("name")
		if name == "" {
			http.Error(w, "name: missing", http.StatusBadRequest)
			return
		}
		v, ok := lookup(name)
		if !ok {
			http.Error(w, name+": not set", http.StatusNotFound)
			return
		}
		io.WriteString(w, v)
	})
	mux.HandleFunc("GET /file", func(w http.ResponseWriter, r *http.Request) {
		path := r.URL.Query().Get("path")
		if path == "" {
			http.Error(w, "path: missing", http.StatusBadRequest)
			return
		}
		b, err := readFile(path)
		if err != nil {
			http.Error(w, err.Error(), http.StatusNotFound)
			return
		}
		w.Write(b)
	})
	mux.HandleFunc("GET /healthz", func(w http.ResponseWriter, r *http.Request) {
		switch up := now().Sub(started); {
		case !cfg.healthy:
			fmt.Println("healthz: unhealthy (APP_HEALTHY=false)")
			http.Error(w, "unhealthy: APP_HEALTHY=false", http.StatusServiceUnavailable)
		case up < cfg.readyAfter:
			fmt.Println("healthz: starting (APP_READY_AFTER_MS)")
			http.Error(w, fmt.Sprintf("starting: up %s of %s", up, cfg.readyAfter), http.StatusServiceUnavailable)
		default:
			io.WriteString(w, "ok")
		}
	})
	return mux
}

// runCheck is the healthcheck process docker runs inside the container. It asks the server
// rather than deciding alone, so "starting" is measured from the server's start.
func runCheck(cfg config) int {
	var out strings.Builder
	code := runGet(cfg, "/healthz", &out)
	fmt.Printf("check: %s\n", out.String())
	return code
}

// runGet prints the body of GET path on the local server; exit 0 only on 200.
func runGet(cfg config, path string, w io.Writer) int {
	host := cfg.listen
	if strings.HasPrefix(host, ":") {
		host = "127.0.0.1" + host
	}
	client := &http.Client{Timeout: 3 * time.Second}
	resp, err := client.Get("http://" + host + path)
	if err != nil {
		fmt.Fprintln(os.Stderr, "get:", err)
		return 1
	}
	defer resp.Body.Close()
	if _, err := io.Copy(w, io.LimitReader(resp.Body, 1<<20)); err != nil {
		fmt.Fprintln(os.Stderr, "get:", err)
		return 1
	}
	if resp.StatusCode != http.StatusOK {
		fmt.Fprintln(os.Stderr, "get:", resp.Status)
		return 1
	}
	return 0
}
