#!/usr/bin/env bash
# Run a lancepart job with spark-submit, shipping the lancepart package to the executors.
#
#   ./spark-submit.sh jobs/<job>.py --config configs/<file>.yaml [--batch-id ID] [spark-submit options]
#
# --config, --batch-id, --logical-date, --default-batch-id, --storage-options-file go to the job,
# the rest to spark-submit (--master, --conf k=v, ...); everything after a literal `--` goes to the
# job. Without --master the job runs on the embedded local[*]. Python: $LANCEPART_PYTHON, else the
# project's .venv, else python3; it must have lancepart's dependencies installed.
# With a --master that is not local[...] the executors get the packed environment of
# `make dist` ($LANCEPART_ARCHIVE, default build/lancepart-env.tar.gz) through --archives and run
# its Python (docs/deployment.md).
set -euo pipefail

here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
if [ $# -lt 1 ] || [ "$1" = "-h" ] || [ "$1" = "--help" ]; then
  sed -n '2,12p' "$0" | sed 's/^# \{0,1\}//'
  exit 0
fi
job="$1"; shift
[ -f "$job" ] || { echo "spark-submit.sh: job file $job not found" >&2; exit 2; }

py="${LANCEPART_PYTHON:-}"
if [ -z "$py" ]; then
  if [ -x "$here/.venv/bin/python" ]; then py="$here/.venv/bin/python"; else py="$(command -v python3)"; fi
fi
spark_home="$("$py" -c 'import os, pyspark; print(os.path.dirname(pyspark.__file__))' 2>/dev/null)" || {
  echo "spark-submit.sh: pyspark is not importable by $py; run 'make setup' first" >&2; exit 2; }

spark_args=(); job_args=(); has_master=0; master="local[*]"; archives=""
while [ $# -gt 0 ]; do
  case "$1" in
    --config) job_args+=("$1" "$2"); shift 2 ;;
    --config=*) job_args+=("$1"); shift ;;
    --batch-id) job_args+=("$1" "$2"); shift 2 ;;
    --batch-id=*) job_args+=("$1"); shift ;;
    --logical-date|--default-batch-id) job_args+=("$1" "$2"); shift 2 ;;
    --logical-date=*|--default-batch-id=*) job_args+=("$1"); shift ;;
    --storage-options-file) job_args+=("$1" "$2"); shift 2 ;;
    --storage-options-file=*) job_args+=("$1"); shift ;;
    --) shift; job_args+=("$@"); break ;;
    --master) has_master=1; master="$2"; spark_args+=("$1" "$2"); shift 2 ;;
    --master=*) has_master=1; master="${1#--master=}"; spark_args+=("$1"); shift ;;
    --archives) archives="$2"; shift 2 ;;
    --archives=*) archives="${1#--archives=}"; shift ;;
    --*=*) spark_args+=("$1"); shift ;;
    --verbose|--supervise) spark_args+=("$1"); shift ;;
    --*) spark_args+=("$1" "$2"); shift 2 ;;
    *) job_args+=("$1"); shift ;;
  esac
done
[ "$has_master" = 1 ] || spark_args+=(--master "local[*]")
# Quiet Spark's INFO logging unless the caller brings its own driver options.
case " ${spark_args[*]} " in
  *" --driver-java-options "*) ;;
  *) spark_args+=(--driver-java-options "-Dlog4j2.configurationFile=file:$here/configs/log4j2.properties") ;;
esac

# Ship the package as a zip so executors import the same code as the driver.
mkdir -p "$here/build"
pkg="$here/build/lancepart-pkg.zip"
(cd "$here" && "$py" - "$pkg" <<'PY'
import os, sys, zipfile
with zipfile.ZipFile(sys.argv[1], "w", zipfile.ZIP_DEFLATED) as z:
    for d, _, files in os.walk("lancepart"):
        for f in files:
            if f.endswith(".py"):
                z.write(os.path.join(d, f))
PY
)

case "$master" in
  local|local\[*) ;;
  *)
    # A cluster's executors do not have this machine's venv: ship the packed environment, unpacked
    # as ./environment in every executor's working directory, and run the workers on its Python.
    archive="${LANCEPART_ARCHIVE:-$here/build/lancepart-env.tar.gz}"
    if [ ! -f "$archive" ]; then
      echo "spark-submit.sh: --master $master runs on a cluster, whose executors need the packed environment" >&2
      echo "  $archive, which does not exist. Build it with 'make dist' (in $here), or set" >&2
      echo "  LANCEPART_ARCHIVE to an archive built by it. See docs/deployment.md." >&2
      exit 2
    fi
    archives="${archives:+$archives,}$archive#environment"
    export PYSPARK_PYTHON="${PYSPARK_PYTHON:-./environment/bin/python}"
    ;;
esac
[ -z "$archives" ] || spark_args+=(--archives "$archives")

export PYSPARK_PYTHON="${PYSPARK_PYTHON:-$py}"
export PYSPARK_DRIVER_PYTHON="${PYSPARK_DRIVER_PYTHON:-$py}"
export SPARK_HOME="${SPARK_HOME:-$spark_home}"
exec "$SPARK_HOME/bin/spark-submit" "${spark_args[@]}" --py-files "$pkg" "$job" "${job_args[@]}"
