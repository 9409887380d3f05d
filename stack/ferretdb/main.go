// Command ferretdb runs FerretDB (MongoDB wire protocol on SQLite) for the local stack.
//
// It exists because `go install github.com/FerretDB/FerretDB/cmd/ferretdb` builds a binary
// that panics at start (the module lacks a generated version file); the embeddable
// package has no such problem. It also stops cleanly on SIGTERM, which the stack sends.
package main

import (
	"context"
	"flag"
	"log"
	"log/slog"
	"os"
	"os/signal"
	"syscall"

	"github.com/FerretDB/FerretDB/ferretdb"
)

func main() {
	listen := flag.String("listen", "127.0.0.1:37017", "TCP address to listen on")
	dataDir := flag.String("data", "data", "directory of the SQLite databases")
	flag.Parse()

	if err := os.MkdirAll(*dataDir, 0o755); err != nil {
		log.Fatal(err)
	}

	logger := slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelWarn}))
	f, err := ferretdb.New(&ferretdb.Config{
		Listener:  ferretdb.ListenerConfig{TCP: *listen},
		Logger:    logger,
		Handler:   "sqlite",
		SQLiteURL: "file:" + *dataDir + "/",
	})
	if err != nil {
		log.Fatal(err)
	}

	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM, syscall.SIGINT)
	defer stop()

	log.Printf("FerretDB listening on %s, data in %s", *listen, *dataDir)
	if err := f.Run(ctx); err != nil && ctx.Err() == nil {
		log.Fatal(err)
	}
}
