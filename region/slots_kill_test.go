package region_test

import (
	"bufio"
	"context"
	"fmt"
	"os"
	"os/exec"
	"strings"
	"testing"
	"time"

	"github.com/quotaplatform/quota/internal/testserver"
	"github.com/quotaplatform/quota/region"
)

// slotHolderEnv makes this test binary a slot holder: it takes every slot
// of the plan below on the Redis named there, says so on stdout and waits
// to be killed, never releasing them.
const slotHolderEnv = "QUOTA_TEST_SLOT_HOLDER"

const killTTL = 2 * time.Second

func killPlan() region.Plan { return region.Plan{Name: "llm", Rate: 1, Capacity: 1, Concurrency: 2} }

// TestKilledHolderFreesItsSlot: a process holding every slot of a key is
// SIGKILLed; its slots stay taken right after the kill (nothing released
// them) and free by themselves within the slot TTL, so another process gets
// one then.
func TestKilledHolderFreesItsSlot(t *testing.T) {
	if v := os.Getenv(slotHolderEnv); v != "" {
		holdSlots(t, v)
		return
	}
	if testing.Short() {
		t.Skip("needs redis-server")
	}
	srv := testserver.StartRedis(t)
	prefix := fmt.Sprintf("killslots%d:", time.Now().UnixNano())
	cmd := exec.Command(os.Args[0], "-test.run=^TestKilledHolderFreesItsSlot$", "-test.count=1")
	cmd.Env = append(os.Environ(), slotHolderEnv+"="+srv.Addr+"|"+prefix)
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	cmd.Stderr = os.Stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = cmd.Process.Kill(); _ = cmd.Wait() })
	held := make(chan error, 1)
	go func() {
		sc := bufio.NewScanner(out)
		for sc.Scan() {
			if strings.HasPrefix(sc.Text(), "held 2") {
				held <- nil
				return
			}
		}
		held <- fmt.Errorf("the holder exited without holding its slots: %v", sc.Err())
	}()
	select {
	case err := <-held:
		if err != nil {
			t.Fatal(err)
		}
	case <-time.After(30 * time.Second):
		t.Fatal("the holder took no slots within 30 s")
	}

	lim, _ := newRedisLimiter(t, redisClient(t, srv.Addr), prefix, killPlan(), func(c *region.Config) {
		c.SlotTTL, c.StoreTimeout = killTTL, time.Second
	})
	ctx := context.Background()
	if s, err := lim.Acquire(ctx, "k", ""); err != nil || s.Allowed {
		t.Fatalf("a slot while the holder holds both: %+v %v", s, err)
	}
	if err := cmd.Process.Kill(); err != nil { // SIGKILL: no release, no drain
		t.Fatal(err)
	}
	_ = cmd.Wait()
	killed := time.Now()
	if s, err := lim.Acquire(ctx, "k", ""); err != nil || s.Allowed {
		t.Fatalf("a slot right after the kill, before the TTL: %+v %v", s, err)
	}
	testserver.WaitFor(t, killTTL+3*time.Second, 20*time.Millisecond, func() error {
		s, err := lim.Acquire(ctx, "k", "")
		if err != nil {
			return err
		}
		if !s.Allowed {
			return fmt.Errorf("no slot yet %v after the kill", time.Since(killed).Round(time.Millisecond))
		}
		return nil
	})
	t.Logf("a killed holder's slot freed %v after the kill (TTL %v)", time.Since(killed).Round(time.Millisecond), killTTL)
}

// holdSlots is the holder's side: take both slots, report, wait for the kill.
func holdSlots(t *testing.T, spec string) {
	addr, prefix, _ := strings.Cut(spec, "|")
	lim, _ := newRedisLimiter(t, redisClient(t, addr), prefix, killPlan(), func(c *region.Config) {
		c.SlotTTL, c.StoreTimeout = killTTL, time.Second
	})
	for i := 0; i < 2; i++ {
		s, err := lim.Acquire(context.Background(), "k", "")
		if err != nil || !s.Allowed {
			t.Fatalf("holder: slot %d: %+v %v", i, s, err)
		}
	}
	fmt.Println("held 2")
	select {} // until SIGKILL
}
