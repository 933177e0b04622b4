// Command etcd runs a single-member etcd server for local test clusters, using
// the embedded server from go.etcd.io/etcd/server/v3/embed at the version the
// kube-apiserver's module graph pins.
package main

import (
	"flag"
	"log"
	"net/url"
	"os"
	"os/signal"
	"syscall"
	"time"

	"go.etcd.io/etcd/server/v3/embed"
)

func main() {
	dataDir := flag.String("data-dir", "etcd-data", "directory for the etcd data")
	clientURL := flag.String("listen-client-url", "http://127.0.0.1:2379", "URL to serve clients on (also advertised)")
	peerURL := flag.String("listen-peer-url", "http://127.0.0.1:2380", "URL to serve peers on (single member, but etcd still binds it)")
	noFsync := flag.Bool("unsafe-no-fsync", false, "disable fsync (faster, loses data on a machine crash; fine for tests)")
	logLevel := flag.String("log-level", "warn", "debug, info, warn or error")
	quota := flag.Int64("quota-backend-bytes", 2<<30, "backend size quota in bytes")
	compaction := flag.String("auto-compaction-retention", "5m", "periodic compaction: the history kept, as a Go duration (what a managed control plane does every 5 minutes)")
	flag.Parse()

	cu, err := url.Parse(*clientURL)
	if err != nil {
		log.Fatalf("--listen-client-url: %v", err)
	}
	pu, err := url.Parse(*peerURL)
	if err != nil {
		log.Fatalf("--listen-peer-url: %v", err)
	}

	cfg := embed.NewConfig()
	cfg.Name = "envtest"
	cfg.Dir = *dataDir
	cfg.ListenClientUrls = []url.URL{*cu}
	cfg.AdvertiseClientUrls = []url.URL{*cu}
	cfg.ListenPeerUrls = []url.URL{*pu}
	cfg.AdvertisePeerUrls = []url.URL{*pu}
	cfg.InitialCluster = cfg.InitialClusterFromName(cfg.Name)
	cfg.UnsafeNoFsync = *noFsync
	cfg.LogLevel = *logLevel
	cfg.LogOutputs = []string{"stderr"}
	cfg.QuotaBackendBytes = *quota
	cfg.AutoCompactionMode = "periodic"
	cfg.AutoCompactionRetention = *compaction

	e, err := embed.StartEtcd(cfg)
	if err != nil {
		log.Fatalf("starting etcd: %v", err)
	}
	select {
	case <-e.Server.ReadyNotify():
		log.Printf("etcd ready, serving clients on %s", cu)
	case <-time.After(60 * time.Second):
		e.Server.Stop()
		log.Fatal("etcd did not become ready within 60s")
	}

	sig := make(chan os.Signal, 1)
	signal.Notify(sig, syscall.SIGINT, syscall.SIGTERM)
	select {
	case s := <-sig:
		log.Printf("received %s, shutting down", s)
		e.Close()
	case err := <-e.Err():
		e.Close()
		log.Fatalf("etcd failed: %v", err)
	}
}
