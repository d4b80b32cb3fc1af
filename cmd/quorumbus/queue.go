package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"os"
	"strconv"
	"strings"
	"text/tabwriter"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/quorumbus/quorumbus/proto/placementpb"
)

// queueCmd manages queues on a running cluster through the placement
// service, until the HTTP gateway exists.
func queueCmd(args []string) error {
	if len(args) == 0 || strings.HasPrefix(args[0], "-") {
		return errors.New("usage: quorumbus queue create|list|get|delete|purge|redrive [flags] [NAME]")
	}
	verb, args := args[0], args[1:]
	if verb == "purge" || verb == "redrive" {
		return messagesCmd("queue", verb, args)
	}
	// Accept the name before or after the flags.
	var name string
	if len(args) > 0 && !strings.HasPrefix(args[0], "-") {
		name, args = args[0], args[1:]
	}
	fs := flag.NewFlagSet("queue "+verb, flag.ContinueOnError)
	var pf placementFlags
	pf.register(fs)
	var d placementpb.QueueDescription
	fs.DurationVar(&d.LockDuration, "lock-duration", 0, "LockDuration (default 1m, max 5m)")
	fs.Func("max-delivery-count", "MaxDeliveryCount (default 10)", uint32Flag(&d.MaxDeliveryCount))
	fs.DurationVar(&d.DefaultMessageTimeToLive, "default-ttl", 0, "DefaultMessageTimeToLive (default: none)")
	fs.BoolVar(&d.DeadLetteringOnMessageExpiration, "dead-letter-on-expiration", false, "DeadLetteringOnMessageExpiration")
	fs.BoolVar(&d.RequiresDuplicateDetection, "duplicate-detection", false, "RequiresDuplicateDetection")
	fs.BoolVar(&d.RequiresSession, "requires-session", false, "RequiresSession: every message needs a SessionId, and receivers take one session at a time")
	fs.DurationVar(&d.DuplicateDetectionHistoryTimeWindow, "duplicate-detection-window", 0, "DuplicateDetectionHistoryTimeWindow (default 10m)")
	fs.DurationVar(&d.SessionAcceptWait, "session-accept-wait", 0, sessionAcceptWaitPropertyUsage)
	fs.Func("partitions", "PartitionCount (0: not partitioned)", uint32Flag(&d.PartitionCount))
	fs.Int64Var(&d.MaxMessageSizeInKilobytes, "max-message-size-kb", 0, "MaxMessageSizeInKilobytes (default 256)")
	fs.Int64Var(&d.MaxSizeInMegabytes, "max-size-mb", 0, "MaxSizeInMegabytes: sends fail with quota exceeded beyond it (default 1024)")
	if err := fs.Parse(args); err != nil {
		return err
	}
	client, closeFn, err := pf.dial()
	if err != nil {
		return err
	}
	defer closeFn()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if name == "" {
		name = fs.Arg(0)
	}
	if verb != "list" && name == "" {
		return fmt.Errorf("queue %s needs a queue name", verb)
	}
	switch verb {
	case "create":
		props := d.Properties()
		var e *placementpb.Entity
		// Right after a cluster starts the meta group may still be
		// electing: wait for it within the deadline.
		for {
			e, err = client.CreateEntity(ctx, &placementpb.CreateEntityRequest{Name: name, Properties: props})
			if status.Code(err) != codes.Unavailable || ctx.Err() != nil {
				break
			}
			time.Sleep(200 * time.Millisecond)
		}
		if err != nil {
			return err
		}
		printEntities([]*placementpb.Entity{e})
	case "get":
		e, err := client.GetEntity(ctx, &placementpb.GetEntityRequest{Name: name})
		if err != nil {
			return err
		}
		printEntities([]*placementpb.Entity{e})
	case "list":
		resp, err := client.ListEntities(ctx, &placementpb.ListEntitiesRequest{})
		if err != nil {
			return err
		}
		printEntities(resp.Entities)
	case "delete":
		if _, err := client.DeleteEntity(ctx, &placementpb.DeleteEntityRequest{Name: name}); err != nil {
			return err
		}
		fmt.Println("deleted", name)
	default:
		return fmt.Errorf("unknown queue command %q", verb)
	}
	return nil
}

func printEntities(es []*placementpb.Entity) {
	w := tabwriter.NewWriter(os.Stdout, 0, 4, 2, ' ', 0)
	fmt.Fprintln(w, "NAME\tID\tSTATUS\tAVAILABILITY\tPARTITIONS\tGROUPS\tLOCK\tMAX-DELIVERY")
	for _, e := range es {
		p := e.GetProperties()
		// Degraded: a group of one of its partitions has no quorum; its
		// other partitions serve.
		availability := "Available"
		if e.Degraded {
			availability = "Degraded"
		}
		fmt.Fprintf(w, "%s\t%d\t%s\t%s\t%d\t%v\t%v\t%d\n", e.Name, e.Id, strings.TrimPrefix(e.Status.String(), "ENTITY_STATUS_"), availability,
			len(e.PartitionGroups), e.PartitionGroups, time.Duration(p.GetLockDurationMs())*time.Millisecond, p.GetMaxDeliveryCount())
	}
	w.Flush()
}

// uint32Flag parses a flag's value into *dst.
func uint32Flag(dst *uint32) func(string) error {
	return func(s string) error {
		v, err := strconv.ParseUint(s, 10, 32)
		*dst = uint32(v)
		return err
	}
}
