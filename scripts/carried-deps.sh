# Sourced by the device scripts: the Debian packages the CLI and tests need, carried as .deb files
# in .deps/ to a machine that reaches no package registry, unpacked under /tmp/mmsparse-deps.
# Sets prefix_args (CMake's prefix path, empty when nothing is carried) and extends
# LD_LIBRARY_PATH.
#
#   source "$repo/scripts/carried-deps.sh"
prefix_args=()
if compgen -G "$repo/.deps/*.deb" >/dev/null; then
  carried_deps=/tmp/mmsparse-deps
  for package in "$repo"/.deps/*.deb; do dpkg -x "$package" "$carried_deps"; done
  prefix_args=(-DCMAKE_PREFIX_PATH="$carried_deps/usr")
  export LD_LIBRARY_PATH="$carried_deps/usr/lib/x86_64-linux-gnu${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
fi
