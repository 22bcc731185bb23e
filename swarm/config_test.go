package swarm

import (
	"testing"
	"time"
)

func TestParseYAMLConfig(t *testing.T) {
	y := `ajet:
  project_name: x   # comment
  data:
    train_batch_size: 8
    max_prompt_length: 3000
  rollout:
    num_repeat: 4
    user_workflow: "tutorial.x->Y"
    list:
    - a
    - b
  swarm_mode_sample_collection_method: rollout_until_finish_enough_non_dummy_tasks
  trainer_common:
    algorithm:
      adv_estimator: grpo
troupe:
  max_staleness: 2
  group_timeout_s: 7.5
  drain_timeout_s: 0.25
`
	tc := DefaultTrainConfig()
	if err := tc.ApplyYAML(y); err != nil {
		t.Fatal(err)
	}
	if tc.BatchSize != 8 || tc.NumRepeat != 4 || tc.MaxPromptTokens != 3000 || tc.MaxStaleness != 2 || tc.CollectionMethod != CollectNonDummyTasks ||
		tc.GroupTimeout != 7500*time.Millisecond || tc.DrainTimeout != 250*time.Millisecond {
		t.Fatalf("parsed %+v", tc)
	}
	bad := DefaultTrainConfig()
	if err := bad.ApplyYAML("troupe:\n  group_timeout_s: -1\n"); err == nil {
		t.Fatal("a negative group timeout should be refused")
	}
	if err := bad.ApplyYAML("ajet:\n  trainer_common:\n    algorithm:\n      adv_estimator: gae\n"); err == nil {
		t.Fatal("gae should be refused")
	}
	if err := bad.ApplyYAML("ajet:\n  data:\n    train_batch_size: lots\n"); err == nil {
		t.Fatal("non-integer batch size should be refused")
	}
}
