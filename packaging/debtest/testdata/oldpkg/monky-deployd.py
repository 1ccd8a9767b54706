#!/bin/sh
# Stand-in for the Python agent's entry point.
echo "monky-deployd (python stand-in) $*"
