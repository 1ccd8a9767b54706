// Command fakedocker stands in for the docker CLI where a test or benchmark runs the real
// monky-deployd binary without an engine. It answers `docker info` and `docker compose ps` from
// files named by environment variables, refuses every other command, and appends its own CPU
// time to FAKEDOCKER_CPU_LOG so a benchmark can take it out of the agent's figure.
package main

import (
	"fmt"
	"os"
	"strings"
	"syscall"
	"time"
)

func main() {
	code := run(os.Args[1:])
	if log := os.Getenv("FAKEDOCKER_CPU_LOG"); log != "" {
		var ru syscall.Rusage
		if syscall.Getrusage(syscall.RUSAGE_SELF, &ru) == nil {
			cpu := time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
			if f, err := os.OpenFile(log, os.O_APPEND|os.O_CREATE|os.O_WRONLY, 0o600); err == nil {
				fmt.Fprintf(f, "%d\n", cpu.Nanoseconds())
				f.Close()
			}
		}
	}
	os.Exit(code)
}

func run(args []string) int {
	if os.Getenv("DOCKER_CONFIG") == "" {
		fmt.Fprintln(os.Stderr, "fakedocker: called without DOCKER_CONFIG")
		return 2
	}
	joined := strings.Join(args, " ")
	switch {
	case joined == "info --format {{json .}}":
		fmt.Println(`{"DockerRootDir": "/var/lib/docker", "ServerVersion": "29.0.1"}`)
		return 0
	case strings.HasPrefix(joined, "compose ") && strings.HasSuffix(joined, " ps -a --format json"):
		b, err := os.ReadFile(os.Getenv("FAKEDOCKER_PS"))
		if err != nil {
			fmt.Fprintln(os.Stderr, "fakedocker:", err)
			return 1
		}
		os.Stdout.Write(b)
		return 0
	}
	fmt.Fprintf(os.Stderr, "fakedocker: unexpected call: docker %s\n", joined)
	return 1
}
