# ROS 2 launch file of the robot side of LOP: lop_robot (inference), lop_bandwidth (link
# monitor) and lop_power (energy per inference). Twin of robot.launch.xml (same arguments, same
# defaults, same command lines).
#
#   ros2 launch launch/robot.launch.py edge_address:=192.168.1.10 model:=zoo:resnet18
#   ros2 launch launch/robot.launch.py edge_address:=tcp/192.168.1.10:7447 backend:=r2r \
#       config:=/etc/lop/robot.yaml model:=/opt/models/yolo.onnx model_id:=yolo
#   ros2 launch launch/robot.launch.py edge_address:=192.168.1.10 cameras:=front,rear
#
# Two cameras on one model (cameras:=front,rear): lop_robot loads the model once and takes
# /front/image_raw and /rear/image_raw (each camera's topic, transport, fit and namespace are
# camera.NAME.* in the parameters file, see config/robot.yaml), publishing each camera's
# detections and debug image under /front and /rear.
#
# Every node reads the parameters file `config` (ROS 2 params-file shape, see
# config/robot.yaml); the launch arguments edge_address, model, model_id and input are passed on
# top of it as `--ros-args -p` overrides (their defaults are config/robot.yaml's defaults), and
# cameras when it is not empty (empty: the parameters file's `cameras`).
#
# Executables: by default the binaries of this repository's build (bin_dir, default
# <repo>/target/release; source scripts/env.sh first so that they find libtorch); with
# package:=NAME, the executables of that installed ROS package instead. Installed by colcon
# (share/robot_node/launch/, next to share/robot_node/package.xml), this file defaults to the
# package robot_node and the r2r backend (colcon builds it with --features ros2, for any RMW):
#
#   ros2 launch robot_node robot.launch.py edge_address:=192.168.1.10

import os

from launch import LaunchDescription
from launch.actions import DeclareLaunchArgument, ExecuteProcess, OpaqueFunction
from launch.substitutions import LaunchConfiguration

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.dirname(HERE)
# Installed by colcon: REPO is then install/share/robot_node, which holds the package manifest.
INSTALLED = os.path.isfile(os.path.join(REPO, "package.xml"))

ARGUMENTS = [
    ("edge_address", "tcp/edge:7447", "the edge server's Zenoh router: HOST, HOST:PORT or a Zenoh endpoint like tcp/HOST:PORT (port 7447 by default)"),
    ("model", "zoo:resnet18", "model.source: zoo:NAME or a path to an .onnx file (the edge must serve it)"),
    ("model_id", "resnet18", "model.id: the id the edge serves the model under"),
    ("input", "camera", "camera (sensor_msgs/Image) or lidar (sensor_msgs/PointCloud2)"),
    ("cameras", "", "several cameras on one model, comma-separated names (e.g. front,rear: /front/image_raw, /rear/image_raw); empty: the config's"),
    ("config", os.path.join(REPO, "config", "robot.yaml"), "the parameters file of the three nodes"),
    ("backend", "r2r" if INSTALLED else "hiroz", "ROS library: hiroz (ROS 2 over Zenoh, rmw_zenoh-compatible) or r2r (a build with feature ros2, any RMW)"),
    ("bin_dir", os.path.join(REPO, "target", "release"), "where lop_robot, lop_bandwidth and lop_power are (when package is empty)"),
    ("package", "robot_node" if INSTALLED else "", "an installed ROS package providing the executables (empty: use bin_dir)"),
    ("use_bandwidth", "true", "start lop_bandwidth"),
    ("use_power", "true", "start lop_power"),
]

NODES = ("lop_robot", "lop_bandwidth", "lop_power")


def edge_endpoint(address):
    """HOST -> tcp/HOST:7447, HOST:PORT -> tcp/HOST:PORT, a Zenoh endpoint stays as it is."""
    if "/" in address:
        return address
    return f"tcp/{address}" if ":" in address else f"tcp/{address}:7447"


def overrides(node, v):
    """The `-p name:=value` overrides each node gets from the launch arguments."""
    endpoint = edge_endpoint(v["edge_address"])
    if node == "lop_robot":
        robot = {"edge.endpoint": endpoint, "model.source": v["model"], "model.id": v["model_id"], "input": v["input"]}
        return {**robot, "cameras": v["cameras"]} if v["cameras"] else robot
    if node == "lop_bandwidth":
        return {"edge.endpoint": endpoint}
    return {}


def truthy(s):
    return s.strip().lower() in ("1", "true", "yes", "on")


def nodes(context):
    v = {name: LaunchConfiguration(name).perform(context) for name, _default, _doc in ARGUMENTS}
    actions = []
    for node in NODES:
        if node == "lop_bandwidth" and not truthy(v["use_bandwidth"]):
            continue
        if node == "lop_power" and not truthy(v["use_power"]):
            continue
        args = ["--config", v["config"], "--backend", v["backend"], "--ros-args"]
        for name, value in overrides(node, v).items():
            args += ["-p", f"{name}:={value}"]
        if v["package"]:
            from launch_ros.actions import Node  # only needed for installed packages

            actions.append(Node(package=v["package"], executable=node, name=node, arguments=args, output="screen"))
        else:
            actions.append(ExecuteProcess(cmd=[os.path.join(v["bin_dir"], node)] + args, name=node, output="screen"))
    return actions


def generate_launch_description():
    return LaunchDescription(
        [DeclareLaunchArgument(name, default_value=default, description=doc) for name, default, doc in ARGUMENTS]
        + [OpaqueFunction(function=nodes)]
    )
