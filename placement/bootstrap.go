package placement

import (
	"errors"
	"time"

	"github.com/hashicorp/raft"
)

// Bounds of the backoff between two rounds of asking the other first
// voters whether the meta group exists.
const (
	bootstrapProbeMin = 50 * time.Millisecond
	bootstrapProbeMax = 2 * time.Second
)

// bootstrapWhenNew bootstraps the meta group on a first voter that opened
// it without Raft state once Config.Guard shows the group is new, and
// gives up once the guard shows it exists or a leader reaches this member
// first. A first voter whose disk was lost must not bootstrap: with the
// same -bootstrap list it would hold the bootstrap entry alone, like a
// first voter that lagged there, and the two could elect one of them
// without the catalog's entries. It joins instead: it is in the group's
// configuration, so the leader brings it up to date, and the guard keeps
// its vote until then.
func (s *Service) bootstrapWhenNew(r *raft.Raft) {
	defer s.wg.Done()
	backoff := bootstrapProbeMin
	for s.ctx.Err() == nil {
		if r.LastIndex() > 0 {
			return // a leader reached this member: the group exists
		}
		exists, err := s.cfg.Guard.Exists(s.ctx, s.cfg.Bootstrap)
		switch {
		case err == nil && exists:
			s.log.Warn("not bootstrapping the meta group: another first voter holds its entries, so this member lost its data; it joins the group and waits for its leader")
			return
		case err == nil:
			conf := raft.Configuration{Servers: s.cfg.Bootstrap}
			if err := r.BootstrapCluster(conf).Error(); err != nil {
				if !errors.Is(err, raft.ErrCantBootstrap) && s.ctx.Err() == nil {
					s.log.Warn("bootstrapping the meta group", "err", err)
				}
				return
			}
			s.cfg.Guard.Bootstrapped()
			s.log.Info("bootstrapped the meta group", "voters", len(conf.Servers))
			return
		}
		s.log.Debug("waiting for every first voter to tell whether the meta group exists", "err", err)
		select {
		case <-time.After(backoff):
		case <-s.ctx.Done():
		}
		backoff = min(2*backoff, bootstrapProbeMax)
	}
}
