// Command app is the program the docker driver's tests run in their image
// (FROM scratch): what it does is chosen by its first argument.
package main

import (
	"fmt"
	"os"
	"os/signal"
	"strconv"
	"syscall"
	"time"
)

func main() {
	if len(os.Args) < 2 {
		fmt.Println("usage: app run|crash CODE|exit CODE|ignore-term|count|env")
		os.Exit(2)
	}
	term := make(chan os.Signal, 1)
	signal.Notify(term, syscall.SIGTERM)
	switch os.Args[1] {
	case "run": // say hello, run until SIGTERM
		fmt.Printf("hello %s\n", os.Getenv("GREETING"))
		fmt.Fprintln(os.Stderr, "to stderr")
		<-term
		fmt.Println("bye")
	case "crash": // exit with the code after a moment
		code, _ := strconv.Atoi(os.Args[2])
		fmt.Println("crashing with", code)
		time.Sleep(100 * time.Millisecond) // the app's behaviour: a run that lasts a moment
		os.Exit(code)
	case "ignore-term": // only SIGKILL ends it
		fmt.Println("ignoring SIGTERM")
		for range term {
			fmt.Println("got SIGTERM, ignored")
		}
	case "count": // a numbered line every 20ms until SIGTERM
		for i := 1; ; i++ {
			fmt.Printf("line %d\n", i)
			select {
			case <-term:
				return
			case <-time.After(20 * time.Millisecond):
			}
		}
	case "exit": // exit at once with the code (a HEALTHCHECK's probe)
		code, _ := strconv.Atoi(os.Args[2])
		os.Exit(code)
	case "env":
		for _, kv := range os.Environ() {
			fmt.Println(kv)
		}
		wd, _ := os.Getwd()
		fmt.Println("wd", wd, "uid", os.Getuid())
		<-term
	default:
		fmt.Println("unknown mode", os.Args[1])
		os.Exit(2)
	}
}
