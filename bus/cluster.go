package bus

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/nats-io/nats.go/jetstream"
)

// awaitJetStream asks for the account's JetStream information until an
// answer comes or ctx ends. In a cluster only the meta leader answers, and a
// request that reaches a node before it has routes to a leader (or before
// one is elected) is dropped, not refused: one request given the whole
// timeout would wait it out although the cluster is ready a second later.
// A server without JetStream says so at once, and is not asked again.
func awaitJetStream(ctx context.Context, js jetstream.JetStream) error {
	wait := 250 * time.Millisecond
	for {
		actx, cancel := context.WithTimeout(ctx, wait)
		_, err := js.AccountInfo(actx)
		cancel()
		switch {
		case err == nil:
			return nil
		case errors.Is(err, jetstream.ErrJetStreamNotEnabled), errors.Is(err, jetstream.ErrJetStreamNotEnabledForAccount):
			return err
		case ctx.Err() != nil:
			return fmt.Errorf("no answer (a cluster answers once a majority of its nodes is up): %w", err)
		}
		wait = min(2*wait, 2*time.Second)
	}
}
