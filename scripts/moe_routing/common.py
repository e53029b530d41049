"""Shared command-line pieces of the routing analyses: arguments, expert count, error exit."""
import sys


def add_common_args(p):
    p.add_argument("trace_dir", help="directory with router_trace_rank*.jsonl")
    p.add_argument("--output-dir", default=None, help="write CSVs and PNGs here")
    p.add_argument("--num-experts", type=int, default=None,
                   help="experts per layer (default: the router state's, else the largest id seen + 1)")
    p.add_argument("--top-k", type=int, default=None, help="router top-k (default: from the trace)")
    p.add_argument("--phase", choices=("train", "eval", "all"), default="train",
                   help="Strata's phase tag to keep (records without one are always kept)")


def resolve_num_experts(args, seen):
    """--num-experts, else the router state's, else `seen` (largest id + 1)."""
    if args.num_experts:
        return args.num_experts
    from moe_routing.router_state import num_experts
    return num_experts(args.trace_dir) or seen


def run_main(main, argv=None):
    """Run a CLI main: errors print `strata: error: ...` and exit 1, never a traceback."""
    try:
        rc = main(argv)
    except (OSError, ValueError, KeyError, RuntimeError, ImportError) as e:
        print("strata: error: %s" % e, file=sys.stderr)
        sys.exit(1)
    sys.exit(rc or 0)
