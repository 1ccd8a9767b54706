// Command app is the stand-in service of the compose integration test: it runs until stopped,
// and `app -check` is its healthcheck (healthy unless /tmp/unhealthy exists).
package main

import (
	"fmt"
	"os"
	"os/signal"
	"syscall"
)

func main() {
	if len(os.Args) > 1 && os.Args[1] == "-check" {
		if _, err := os.Stat("/tmp/unhealthy"); err == nil {
			os.Exit(1)
		}
		return
	}
	fmt.Println("app: serving")
	c := make(chan os.Signal, 1)
	signal.Notify(c, syscall.SIGTERM, syscall.SIGINT)
	<-c
}
