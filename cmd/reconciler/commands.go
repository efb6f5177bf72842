package main

import (
	"errors"
	"fmt"
	"io"
	"strings"

	"github.com/quotaplatform/quota/internal/settings"
)

// A command is one of the reconciler's subcommands.
type command struct {
	name    string // as typed: "serve", "stripe-customer set"
	args    string // its usual flags, for the synopsis
	summary string // one line
	declare func(*settings.Set, *stripeOptions)
}

// commands are the reconciler's subcommands, in the order help lists
// them. None is the default.
var commands = []command{
	{"serve", "--nats URL --postgres URL", "consume usage reports into the ledger; serve /v1/usage, /metrics, /healthz, /readyz; answer quota-base requests; mirror the catalogue's plans", declareServe},
	{"migrate", "--postgres URL", "apply the ledger's schema migrations", declareMigrate},
	{"retention", "--keep-months N [--ahead-months M]", "create the coming months' partitions, detach old ones", declareRetention},
	{"stream-migrate", "--nats URL [--migrate-wait 30m]", "replace a usage stream of limits retention (an older release's) by a work-queue one once the reconcilers wrote what it holds", declareStreamMigrate},
	{"usage", "--key K --from T1 --to T2 | --quotas --key K [--at T]", "print one key's usage, or each quota's period, limit, used and remaining, from Postgres", declareUsage},
	{"export", "--month 2026-11 [--granularity G] [--calendar C] [--format csv|ndjson]", "print every key's usage per period", declareExport},
	{"events", "--sink URL --month 2026-11|--continuous", "send closed periods' usage to a sink (CloudEvents over HTTP, or JetStream)", declareEvents},
	{"sinks-report", "--month 2026-11 [--sink S]", "compare the ledger with what each sink acknowledged, per period and per key", declareSinksReport},
	{"stripe-sync", "--meter EVENT_NAME --month 2026-11|--continuous", "send closed periods' usage to a Stripe meter", declareStripeSync},
	{"stripe-settle", "--meter EVENT_NAME --event-id ID --outcome delivered|missing", "settle a meter event held past Stripe's dedupe window", declareStripeSettle},
	{"stripe-customer set", "--key K --customer cus_… [--anchor-day N --time-zone Z]", "map a key to the Stripe customer billed for it", declareStripeCustomerSet},
	{"stripe-customer list", "", "list the keys mapped to Stripe customers", declareStripeCustomerList},
	{"audit", "--key K --month 2026-11 [--meter M] [--format csv|json]", "print every request, answer and decision about a key's sink events for the periods of a month, oldest first", declareAudit},
	{"preview", "--meter EVENT_NAME --month 2026-11|--continuous [--format csv|json]", "print what the next stripe-sync run would send, per customer, writing and sending nothing", declarePreview},
	{"statement", "--customer cus_… --month 2026-11 [--format csv|json]", "print a Stripe customer's keys for a month (allowed, charged, refunded, net, billed) and their total", declareStatement},
}

// lookupCommand finds the command named name.
func lookupCommand(name string) (command, bool) {
	for _, c := range commands {
		if c.name == name {
			return c, true
		}
	}
	return command{}, false
}

// commandSettings declares the settings of the command name on o; false
// for a name that is not a command. Its flag set's usage is the
// command's help.
func commandSettings(name string, o *stripeOptions) (*settings.Set, bool) {
	c, ok := lookupCommand(name)
	if !ok {
		return nil, false
	}
	s := settings.New("reconciler "+name, envPrefix)
	declareCommon(s, &o.options)
	c.declare(s, o)
	fs := s.FlagSet()
	fs.Usage = func() { printCommandHelp(fs.Output(), c, s) }
	return s, true
}

// envNote says where else a flag is read from.
const envNote = `Every flag also reads QUOTA_<FLAG> from the environment (upper case,
dashes as underscores; an empty variable counts as unset): the command
line wins, then the environment, then the default. There is no config file.
`

// printCommands prints the synopsis of every command.
func printCommands(w io.Writer) {
	fmt.Fprint(w, "Usage: reconciler COMMAND [flags]\n       reconciler --version\n\nCommands:\n")
	width := len("help [COMMAND]")
	for _, c := range commands {
		width = max(width, len(c.name))
	}
	for _, c := range commands {
		fmt.Fprintf(w, "  %-*s  %s\n", width, c.name, c.summary)
	}
	fmt.Fprintf(w, "  %-*s  %s\n", width, "help [COMMAND]", "print this help, or COMMAND's flags (reconciler COMMAND --help too); help --markdown: every command's settings as Markdown tables")
	fmt.Fprint(w, "\n"+envNote)
}

// printCommandHelp prints c's synopsis, summary and flags.
func printCommandHelp(w io.Writer, c command, s *settings.Set) {
	fmt.Fprintf(w, "Usage: reconciler %s [flags]\n", c.name)
	if c.args != "" {
		fmt.Fprintf(w, "       reconciler %s %s\n", c.name, c.args)
	}
	fmt.Fprintf(w, "\n%s.\n\n%s\nFlags:\n", upperFirst(c.summary), envNote)
	fs := s.FlagSet()
	out := fs.Output()
	fs.SetOutput(w)
	fs.PrintDefaults()
	fs.SetOutput(out)
}

func upperFirst(s string) string {
	if s == "" {
		return s
	}
	return strings.ToUpper(s[:1]) + s[1:]
}

// help is `reconciler help [COMMAND | --markdown]`: every command with
// its summary, one command's flags, or every command's settings as the
// Markdown tables of docs/configuration.md.
func help(args []string, w io.Writer) error {
	name := strings.Join(args, " ")
	switch name {
	case "":
		printCommands(w)
		return nil
	case "--markdown", "-markdown":
		return writeSettingsMarkdown(w)
	}
	o := stripeOptions{options: defaultOptions(), KeyEnv: defaultStripeKeyEnv}
	s, ok := commandSettings(name, &o)
	if !ok {
		return fmt.Errorf("help: no command %q; reconciler help lists them", name)
	}
	c, _ := lookupCommand(name)
	printCommandHelp(w, c, s)
	return nil
}

// writeSettingsMarkdown writes the settings every command has, then each
// command's own as a Markdown table under its own heading (the shared ones
// once: repeated in each table they took a seventh of the page).
func writeSettingsMarkdown(w io.Writer) error {
	o := stripeOptions{options: defaultOptions(), KeyEnv: defaultStripeKeyEnv}
	common := settings.New("reconciler", envPrefix)
	declareCommon(common, &o.options)
	fmt.Fprint(w, "### Every command\n\n")
	errs := []error{common.WriteMarkdown(w)}
	for _, c := range commands {
		fmt.Fprintf(w, "\n### `reconciler %s`\n\n%s.\n\n", c.name, upperFirst(c.summary))
		o := stripeOptions{options: defaultOptions(), KeyEnv: defaultStripeKeyEnv}
		s := settings.New("reconciler "+c.name, envPrefix)
		c.declare(s, &o)
		var table strings.Builder
		errs = append(errs, s.WriteMarkdown(&table))
		if strings.Count(table.String(), "\n") == 2 { // the header alone
			fmt.Fprint(w, "None but those of every command.\n")
			continue
		}
		fmt.Fprint(w, table.String())
	}
	return errors.Join(errs...)
}
