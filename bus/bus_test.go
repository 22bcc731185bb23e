package bus

import (
	"context"
	"os"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"
)

func TestEmbeddedStorePersists(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	dir := t.TempDir()
	b, err := Open(ctx, Config{DataDir: dir})
	if err != nil {
		t.Fatal(err)
	}
	if !b.Embedded() || b.ClientURL() != "" {
		t.Fatalf("embedded=%v url=%q: want an embedded server with no port", b.Embedded(), b.ClientURL())
	}
	js := b.JetStream()
	if _, err := js.CreateStream(ctx, jetstream.StreamConfig{Name: "T", Subjects: []string{"t.>"}}); err != nil {
		t.Fatal(err)
	}
	for _, id := range []string{"a", "b", "a"} { // the second "a" is a duplicate
		if _, err := js.Publish(ctx, "t.x", []byte(id), jetstream.WithMsgID(id)); err != nil {
			t.Fatal(err)
		}
	}
	b.Close()

	b, err = Open(ctx, Config{DataDir: dir})
	if err != nil {
		t.Fatal(err)
	}
	defer b.Close()
	st, err := b.JetStream().Stream(ctx, "T")
	if err != nil {
		t.Fatal(err)
	}
	info, err := st.Info(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if info.State.Msgs != 2 {
		t.Fatalf("after a restart the stream holds %d messages, want 2 (a, b; the duplicate a dropped)", info.State.Msgs)
	}
}

func TestMemoryStoreRemoved(t *testing.T) {
	ctx := context.Background()
	b, err := Open(ctx, Config{})
	if err != nil {
		t.Fatal(err)
	}
	d := b.tmpStore
	if d == "" {
		t.Fatal("no temporary store recorded")
	}
	b.Close()
	if _, err := os.Stat(d); !os.IsNotExist(err) {
		t.Fatalf("temporary store %s left behind (err %v)", d, err)
	}
}

func TestOpenExternalRefused(t *testing.T) {
	ctx := context.Background()
	_, err := Open(ctx, Config{URL: "nats://127.0.0.1:1", ConnectTimeout: time.Second})
	if err == nil {
		t.Fatal("connecting to a closed port succeeded")
	}
}

func TestListenAndJoin(t *testing.T) {
	ctx := context.Background()
	srv, err := Open(ctx, Config{Listen: "127.0.0.1:0", DataDir: t.TempDir()})
	if err != nil {
		t.Fatal(err)
	}
	defer srv.Close()
	u := srv.ClientURL()
	if u == "" {
		t.Fatal("no client URL for a listening server")
	}
	c, err := Open(ctx, Config{URL: u})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	if c.Embedded() {
		t.Fatal("a client of an external server reports an embedded one")
	}
	if _, err := c.JetStream().CreateKeyValue(ctx, jetstream.KeyValueConfig{Bucket: "kv"}); err != nil {
		t.Fatal(err)
	}
}

func TestSubject(t *testing.T) {
	for in, want := range map[string]string{"qwen2.5-0.5b": "qwen2_5-0_5b", "a b>*": "a_b__", "": "_"} {
		if got := Subject(in); got != want {
			t.Errorf("Subject(%q) = %q, want %q", in, got, want)
		}
	}
}
